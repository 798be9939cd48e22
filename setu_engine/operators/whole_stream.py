"""The blocking operators, `dedupe` and `aggregate`: they see the whole stream
before they emit a row, and run two ways with one result, like the rest of
the chain (chain.py): an accumulator fed batch by batch in Python, and
one `DISTINCT ON` / `GROUP BY` query over the staging table in PostgreSQL.

Memory in Python is bounded by the number of distinct keys (dedupe: one row
per key; aggregate: one set of running values per group), not by the rows.

- dedupe keeps, per key, the row with the greatest `order_by` value (the
  smallest with `order: asc`); a NULL order value loses to any other (NULLS
  LAST both ways). Rows tied on it: the one read last wins (in SQL, the one
  with the greatest ctid: the staging table is filled in stream order by
  COPY, in one transaction, so ctid order is read order). NULL keys are
  equal to each other, as in SQL's DISTINCT ON and GROUP BY; so is NaN.
- aggregate types its metrics as PostgreSQL does: count -> bigint; sum of
  smallint/integer -> bigint, of bigint/numeric -> numeric, of real/double
  -> double (a real is summed as double); min/max keep the column's type
  (text compares in code point order, COLLATE "C"). NULLs are skipped; a
  group whose values are all NULL sums to NULL, counts 0. Without group_by,
  one row for the whole stream, even an empty one.

This module knows columns and rows, not the spec: chain.py parses the
operators and turns a `BlockingError` into its SpecError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from setu_engine.errors import BlockingError, OperatorError
from setu_engine.filters.expr_compile import NUMERIC_CTX, quote_ident
from setu_engine.values.types import INTEGERS, Column, Row

# The staging table's row order, carried to dedupe's tie-break (SQL side).
SEQ = "__setu_seq"
METRICS = ("count", "sum", "min", "max")
_SUMMABLE = INTEGERS | {"numeric", "real", "double"}
_ORDERED = _SUMMABLE | {"text", "boolean", "date", "time", "timestamp", "timestamptz"}
_SUM_TYPE = {"smallint": "bigint", "integer": "bigint", "bigint": "numeric", "numeric": "numeric"}
_BIGINT = 2**63


class Accumulator(Protocol):
    def add(self, rows: Sequence[Row]) -> None: ...

    def rows(self) -> Iterator[Row]: ...


class Step(Protocol):
    """A planned blocking operator over a known input schema."""

    @property
    def output(self) -> tuple[Column, ...]: ...

    def sources(self) -> tuple[str | None, ...]:
        """Per output column, the input column it carries unchanged, or None."""
        ...

    def accumulator(self) -> Accumulator: ...

    def sql(self, relation: str) -> str:
        """The step over `relation`, whose columns are the input and SEQ."""
        ...


def _find(columns: Sequence[Column], name: str, path: str) -> int:
    for i, c in enumerate(columns):
        if c.name == name:
            return i
    has = ", ".join(c.name for c in columns)
    raise BlockingError(f"{path}: unknown column {name!r} (stream has: {has})")


def _nan_free(value: Any) -> Any:
    """A value as a dict key with SQL's equality: every NaN is one value."""
    if isinstance(value, float) and value != value:
        return _NAN
    if isinstance(value, Decimal) and value.is_nan():
        return _NAN
    return value


_NAN = object()


def _order_key(type_: str) -> Callable[[Any], Any]:
    """PostgreSQL's order for a non-null value: NaN above every number."""
    if type_ in ("real", "double"):
        return lambda x: (1, 0.0) if x != x else (0, x)
    if type_ == "numeric":
        return lambda x: (1, Decimal(0)) if x.is_nan() else (0, x)
    return lambda x: x


# -- dedupe ----------------------------------------------------------------------


@dataclass(frozen=True)
class Dedupe:
    columns: tuple[Column, ...]
    keys: tuple[int, ...]
    order: int
    descending: bool

    @classmethod
    def plan(
        cls, columns: Sequence[Column], path: str, keys: Sequence[str], order_by: str, desc: bool
    ) -> Dedupe:
        positions = tuple(_find(columns, k, f"{path}.keys") for k in keys)
        for p in positions:
            if columns[p].type == "json":
                raise BlockingError(
                    f"{path}.keys: dedupe cannot key on json column {columns[p].name!r}; "
                    f"cast it to text first"
                )
        order = _find(columns, order_by, f"{path}.order_by")
        if columns[order].type not in _ORDERED | {"uuid", "bytes"}:
            raise BlockingError(
                f"{path}.order_by: cannot order by {columns[order].type} column {order_by!r}"
            )
        return cls(tuple(columns), positions, order, desc)

    @property
    def output(self) -> tuple[Column, ...]:
        return self.columns

    def sources(self) -> tuple[str | None, ...]:
        return tuple(c.name for c in self.columns)

    def accumulator(self) -> Accumulator:
        return _Latest(self)

    def sql(self, relation: str) -> str:
        keys = ", ".join(quote_ident(self.columns[k].name) for k in self.keys)
        names = ", ".join(quote_ident(c.name) for c in self.columns)
        order = self.columns[self.order]
        collate = ' COLLATE "C"' if order.type == "text" else ""
        way = "DESC" if self.descending else "ASC"
        return (
            f"SELECT DISTINCT ON ({keys}) {names} FROM {relation} ORDER BY {keys}, "
            f"{quote_ident(order.name)}{collate} {way} NULLS LAST, {quote_ident(SEQ)} DESC"
        )


class _Latest:
    """One row per key: the best by the order column, the last read on a tie."""

    def __init__(self, step: Dedupe) -> None:
        self._keys = step.keys
        self._order = step.order
        self._rank = _order_key(step.columns[step.order].type)
        self._desc = step.descending
        self._best: dict[tuple[Any, ...], Row] = {}

    def add(self, rows: Sequence[Row]) -> None:
        best, keys, order = self._best, self._keys, self._order
        for row in rows:
            key = tuple(_nan_free(row[k]) for k in keys)
            held = best.get(key)
            if held is None or self._wins(row[order], held[order]):
                best[key] = row

    def _wins(self, new: Any, held: Any) -> bool:
        if new is None or held is None:
            return held is None  # NULLS LAST; two NULLs tie, so the later wins
        a, b = self._rank(new), self._rank(held)
        return bool(a >= b if self._desc else a <= b)

    def rows(self) -> Iterator[Row]:
        return iter(self._best.values())


# -- aggregate --------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    name: str
    function: str  # one of METRICS
    column: str | None  # None: count(*)


@dataclass(frozen=True)
class _Planned:
    column: Column  # the output
    position: int | None  # the input it reads; None for count(*)
    sql: str
    start: Callable[[Any], Any]
    step: Callable[[Any, Any], Any]
    final: Callable[[Any], Any]


@dataclass(frozen=True)
class Aggregate:
    columns: tuple[Column, ...]
    group: tuple[int, ...]
    metrics: tuple[_Planned, ...]

    @classmethod
    def plan(
        cls,
        columns: Sequence[Column],
        path: str,
        group_by: Sequence[str],
        metrics: Sequence[Metric],
    ) -> Aggregate:
        group = tuple(_find(columns, g, f"{path}.group_by") for g in group_by)
        for g in group:
            if columns[g].type == "json":
                raise BlockingError(
                    f"{path}.group_by: cannot group by json column {columns[g].name!r}; "
                    f"cast it to text first"
                )
        planned = tuple(_plan_metric(columns, f"{path}.metrics.{m.name}", m) for m in metrics)
        return cls(tuple(columns), group, planned)

    @property
    def output(self) -> tuple[Column, ...]:
        return tuple(self.columns[g] for g in self.group) + tuple(m.column for m in self.metrics)

    def sources(self) -> tuple[str | None, ...]:
        return tuple(self.columns[g].name for g in self.group) + (None,) * len(self.metrics)

    def accumulator(self) -> Accumulator:
        return _Groups(self)

    def sql(self, relation: str) -> str:
        group = ", ".join(quote_ident(self.columns[g].name) for g in self.group)
        exprs = [quote_ident(self.columns[g].name) for g in self.group]
        exprs += [f"{m.sql} AS {quote_ident(m.column.name)}" for m in self.metrics]
        sql = f"SELECT {', '.join(exprs)} FROM {relation}"
        return f"{sql} GROUP BY {group}" if group else sql


def _plan_metric(columns: Sequence[Column], path: str, metric: Metric) -> _Planned:
    if metric.column is None:
        return _Planned(Column(metric.name, "bigint", False), None, "count(*)", _one, _count, _same)
    position = _find(columns, metric.column, path)
    source = columns[position]
    ref = quote_ident(source.name)
    if metric.function == "count":
        return _Planned(
            Column(metric.name, "bigint", False), position, f"count({ref})", _one, _count, _same
        )
    if metric.function == "sum":
        return _sum(metric.name, source, position, path)
    return _extreme(metric, source, position, path)


def _one(_value: Any) -> int:
    return 1


def _count(acc: int, _value: Any) -> int:
    return acc + 1


def _same(value: Any) -> Any:
    return value


def _sum(name: str, source: Column, position: int, path: str) -> _Planned:
    if source.type not in _SUMMABLE:
        raise BlockingError(f"{path}: cannot sum {source.type} column {source.name!r}")
    ref = quote_ident(source.name)
    type_ = _SUM_TYPE.get(source.type, "double")
    if type_ == "double":
        return _Planned(
            Column(name, "double"), position, f"sum({ref}::float8)", float, _add_double, _same
        )
    if source.type == "numeric":
        return _Planned(Column(name, type_), position, f"sum({ref})", _same, NUMERIC_CTX.add, _same)
    final = _as_bigint if type_ == "bigint" else Decimal
    return _Planned(Column(name, type_), position, f"sum({ref})", _same, _add_int, final)


def _add_double(acc: float, value: float) -> float:
    total = acc + value
    inf = float("inf")
    if abs(total) == inf and abs(acc) != inf and abs(value) != inf:
        raise OperatorError("value out of range: overflow")
    return total


def _add_int(acc: int, value: int) -> int:
    return acc + value


def _as_bigint(total: int) -> int:
    if not -_BIGINT <= total < _BIGINT:
        raise OperatorError("bigint out of range")
    return total


def _extreme(metric: Metric, source: Column, position: int, path: str) -> _Planned:
    if source.type not in _ORDERED:
        raise BlockingError(f"{path}: cannot take {metric.function} of {source.type} column")
    ref = quote_ident(source.name)
    lowest = metric.function == "min"
    if source.type == "boolean":
        # PostgreSQL has no min(boolean): bool_and is the min, bool_or the max.
        sql = f"bool_and({ref})" if lowest else f"bool_or({ref})"
        pick: Callable[[Any, Any], Any] = (
            (lambda a, b: a and b) if lowest else (lambda a, b: a or b)
        )
    else:
        collate = ' COLLATE "C"' if source.type == "text" else ""
        sql = f"{metric.function}({ref}{collate})"
        pick = _picker(_order_key(source.type), lowest)
    column = Column(metric.name, source.type, True, source.sql_type)
    return _Planned(column, position, sql, _same, pick, _same)


def _picker(rank: Callable[[Any], Any], lowest: bool) -> Callable[[Any, Any], Any]:
    if lowest:
        return lambda a, b: b if rank(b) < rank(a) else a
    return lambda a, b: b if rank(b) > rank(a) else a


class _Groups:
    """Running values per group; a metric's slot stays None until a non-null
    value (or, for count(*), a row) reaches it."""

    def __init__(self, step: Aggregate) -> None:
        self._group = step.group
        self._metrics = step.metrics
        self._groups: dict[tuple[Any, ...], tuple[Row, list[Any]]] = {}

    def add(self, rows: Sequence[Row]) -> None:
        groups, group, metrics = self._groups, self._group, self._metrics
        for row in rows:
            key = tuple(_nan_free(row[g]) for g in group)
            held = groups.get(key)
            if held is None:
                held = groups[key] = (tuple(row[g] for g in group), [None] * len(metrics))
            accs = held[1]
            for i, m in enumerate(metrics):
                value = row if m.position is None else row[m.position]
                if value is None:
                    continue
                accs[i] = m.start(value) if accs[i] is None else m.step(accs[i], value)

    def rows(self) -> Iterator[Row]:
        if not self._groups and not self._group:
            # SQL: an aggregate without GROUP BY gives one row, even over none.
            self._groups[()] = ((), [None] * len(self._metrics))
        for values, accs in self._groups.values():
            yield values + tuple(_final(m, a) for m, a in zip(self._metrics, accs, strict=True))


def _final(metric: _Planned, acc: Any) -> Any:
    if acc is None:
        return 0 if metric.column.type == "bigint" and not metric.column.nullable else None
    return metric.final(acc)
