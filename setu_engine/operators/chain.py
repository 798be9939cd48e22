"""The operator chain of a pipeline spec, run two ways with one result.

`parse_spec` validates a spec document's structure (no schema needed);
`Chain.plan(columns)` checks it against a stream's input schema and compiles
every output column (and every filter) into an `expr_compile.Compiled`: a Python
function of an input row plus the SQL that computes the same value from the
staging table's columns. `Plan.apply` runs the functions over a batch;
`Plan.select_sql` is one `SELECT ... FROM <relation> WHERE ...` for
PostgreSQL. Because every column is an expression of the *input* row, a
filter after a cast reads the cast value in both ways, and the filters are
tested before any output column is computed (as PostgreSQL evaluates WHERE
before the select list), so a value that fails to cast in a filtered-out row
raises in neither.

Casts (their Python converters, SQL and PostgreSQL-style text output) live
in casts.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from operator import itemgetter
from typing import Any

from setu_engine.errors import (
    BlockingError,
    ExprError,
    OperatorError,
    SpecError,
    SqlTypeError,
    TypeNameError,
)
from setu_engine.filters.expr import Node, parse
from setu_engine.filters.expr_compile import (
    Compiled,
    column_refs,
    compile_filter,
    constant,
    quote_ident,
    quote_literal,
    row_fault,
)
from setu_engine.operators.casts import cast_column, cast_literal, from_json, sql_literal, supported
from setu_engine.operators.whole_stream import METRICS, SEQ, Aggregate, Dedupe, Metric, Step
from setu_engine.values import sqltypes
from setu_engine.values.types import Batch, Column, Row, neutral

__all__ = [
    "Chain",
    "Operator",
    "OperatorError",
    "PipelineSpec",
    "Plan",
    "SpecError",
    "cast_literal",
    "parse_spec",
]


OPS = (
    "rename",
    "select",
    "drop",
    "cast",
    "filter",
    "constant",
    "hash",
    "mask",
    "dedupe",
    "aggregate",
)
_FIELDS: dict[str, frozenset[str]] = {
    "rename": frozenset({"columns"}),
    "select": frozenset({"columns"}),
    "drop": frozenset({"columns"}),
    "cast": frozenset({"columns"}),
    "filter": frozenset({"where"}),
    "constant": frozenset({"column", "value", "type"}),
    "hash": frozenset({"columns"}),
    "mask": frozenset({"columns", "keep", "char"}),
    "dedupe": frozenset({"keys", "order_by", "order"}),
    "aggregate": frozenset({"group_by", "metrics"}),
}


@dataclass(frozen=True)
class Operator:
    """One validated operator; `index` is its place in spec.operators."""

    op: str
    index: int
    streams: tuple[str, ...] | None = None
    columns: tuple[str, ...] = ()
    # rename: old -> new; cast: name -> neutral type
    mapping: tuple[tuple[str, str], ...] = ()
    where: str = ""
    node: Node | None = field(default=None, compare=False)
    column: str = ""
    type: str = ""
    value: Any = None  # constant: the neutral Python value
    raw: Any = None  # constant: the JSON value as written
    keep: int = 4
    char: str = "*"
    # dedupe: keys in `columns`, order_by in `column`; aggregate: group_by
    # in `columns`.
    descending: bool = True
    metrics: tuple[Metric, ...] = ()

    @property
    def path(self) -> str:
        return f"spec.operators[{self.index}]"

    def applies_to(self, stream: str, namespace: str) -> bool:
        if self.streams is None:
            return True
        return stream in self.streams or f"{namespace}.{stream}" in self.streams

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op}
        if self.op in ("rename", "cast"):
            out["columns"] = dict(self.mapping)
        elif self.op in ("select", "drop", "hash", "mask"):
            out["columns"] = list(self.columns)
        if self.op == "mask":
            out["keep"], out["char"] = self.keep, self.char
        if self.op == "filter":
            out["where"] = self.where
        if self.op == "constant":
            out.update(column=self.column, value=self.raw, type=self.type)
        if self.op in ("dedupe", "aggregate"):
            out.update(_blocking_dict(self))
        if self.streams is not None:
            out["streams"] = list(self.streams)
        return out


# -- parsing -----------------------------------------------------------------


def parse_spec(doc: Mapping[str, Any] | None) -> PipelineSpec:
    """A validated PipelineSpec; raises SpecError naming the faulty path."""
    if doc is None:
        return PipelineSpec()
    if not isinstance(doc, Mapping):
        raise SpecError("spec: must be an object")
    unknown = set(doc) - {"operators", "primary_key", "destination", "columns", EVOLUTION_KEY}
    unknown -= {"sync"}  # read by setu_engine/planning/incremental.py
    if unknown:
        raise SpecError(f"spec: unknown field {sorted(unknown)[0]!r}")
    raw_ops = doc.get("operators")
    raw_ops = [] if raw_ops is None else raw_ops
    if not isinstance(raw_ops, list):
        raise SpecError("spec.operators: must be a list")
    operators = tuple(_parse_operator(i, op) for i, op in enumerate(raw_ops))
    keys = _string_map(doc.get("primary_key"), "spec.primary_key", _name_list)
    destinations = _string_map(doc.get("destination"), "spec.destination", _name)
    declared = _string_map(doc.get("columns"), "spec.columns", _declared_types)
    evolution = _schema_evolution(doc.get(EVOLUTION_KEY, SchemaEvolution.ADD_COLUMNS))
    return PipelineSpec(operators, keys, destinations, declared, evolution)


EVOLUTION_KEY = "schema_evolution"


class SchemaEvolution(StrEnum):
    """What a load does when the stream has a column its destination table
    lacks: add it (nullable), or refuse the load naming the columns."""

    ADD_COLUMNS = "add_columns"
    FAIL = "fail"


def _schema_evolution(value: Any) -> SchemaEvolution:
    try:
        return SchemaEvolution(value)
    except ValueError:
        choices = ", ".join(e.value for e in SchemaEvolution)
        raise SpecError(f"spec.{EVOLUTION_KEY}: one of {choices}, not {value!r}") from None


def _string_map(value: Any, path: str, item: Callable[[Any, str], Any]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{path}: must be an object of stream name -> value")
    return {str(k): item(v, f"{path}.{k}") for k, v in value.items()}


def _name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise SpecError(f"{path}: must be a non-empty name")
    return value


def _name_list(value: Any, path: str, *, allow_empty: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list) or (not value and not allow_empty):
        raise SpecError(f"{path}: must be a non-empty list of column names")
    names = tuple(_name(v, f"{path}[{i}]") for i, v in enumerate(value))
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(f"{path}: column {dupes[0]!r} is listed twice")
    return names


def _name_map(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping) or not value:
        raise SpecError(f"{path}: must be a non-empty object")
    return tuple((_name(k, path), _name(v, f"{path}.{k}")) for k, v in value.items())


def _declared_types(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    """spec.columns.<stream>: {column: SQL type}, each type in sqltypes' whitelist."""
    if not isinstance(value, Mapping) or not value:
        raise SpecError(f"{path}: must be a non-empty object of column -> type")
    declared = []
    for column, type_name in value.items():
        where = f"{path}.{_name(column, path)}"
        if not isinstance(type_name, str):
            raise SpecError(f"{where}: must be a type name such as varchar(20) or timestamptz")
        try:
            declared.append((column, sqltypes.canonical(type_name)))
        except SqlTypeError as exc:
            raise SpecError(f"{where}: {exc}") from None
    return tuple(declared)


def _type_name(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise SpecError(f"{path}: must be a type name")
    try:
        return neutral(value)
    except TypeNameError as exc:
        raise SpecError(f"{path}: {exc}") from None


def _parse_operator(index: int, raw: Any) -> Operator:
    path = f"spec.operators[{index}]"
    if not isinstance(raw, Mapping):
        raise SpecError(f"{path}: must be an object")
    op = raw.get("op")
    if op not in OPS:
        raise SpecError(f"{path}.op: unknown operator {op!r}; use one of {', '.join(OPS)}")
    extra = set(raw) - _FIELDS[op] - {"op", "streams"}
    if extra:
        raise SpecError(f"{path}: unknown field {sorted(extra)[0]!r} for {op}")
    streams = None
    if "streams" in raw:
        streams = _name_list(raw["streams"], f"{path}.streams")
    base = Operator(op, index, streams)
    if op in ("rename", "cast"):
        mapping = _name_map(raw.get("columns"), f"{path}.columns")
        if op == "cast":
            mapping = tuple((k, _type_name(v, f"{path}.columns.{k}")) for k, v in mapping)
        return _replace(base, mapping=mapping)
    if op in ("select", "drop", "hash"):
        return _replace(base, columns=_name_list(raw.get("columns"), f"{path}.columns"))
    if op == "mask":
        return _parse_mask(base, raw, path)
    if op == "filter":
        return _parse_filter(base, raw.get("where"), path)
    if op == "dedupe":
        return _parse_dedupe(base, raw, path)
    if op == "aggregate":
        return _parse_aggregate(base, raw, path)
    return _parse_constant(base, raw, path)


def _replace(op: Operator, **changes: Any) -> Operator:
    return dataclasses.replace(op, **changes)


def _parse_mask(base: Operator, raw: Mapping[str, Any], path: str) -> Operator:
    columns = _name_list(raw.get("columns"), f"{path}.columns")
    keep = raw.get("keep", 4)
    if isinstance(keep, bool) or not isinstance(keep, int) or not 0 <= keep <= 1_000_000:
        raise SpecError(f"{path}.keep: must be an integer >= 0")
    char = raw.get("char", "*")
    if not isinstance(char, str) or len(char) != 1 or char == "\x00":
        raise SpecError(f"{path}.char: must be one character")
    return _replace(base, columns=columns, keep=keep, char=char)


def _parse_filter(base: Operator, where: Any, path: str) -> Operator:
    if not isinstance(where, str) or not where.strip():
        raise SpecError(f"{path}.where: must be a non-empty filter expression")
    try:
        node = parse(where)
    except ExprError as exc:
        raise SpecError(f"{path}.where: {exc}") from None
    return _replace(base, where=where, node=node)


def _parse_constant(base: Operator, raw: Mapping[str, Any], path: str) -> Operator:
    column = _name(raw.get("column"), f"{path}.column")
    if "value" not in raw:
        raise SpecError(f"{path}.value: is required (null needs a type)")
    value = raw["value"]
    if raw.get("type") is not None:
        type_ = _type_name(raw["type"], f"{path}.type")
    else:
        type_ = _infer_type(value, path)
    try:
        converted = from_json(value, type_)
    except (ValueError, ArithmeticError) as exc:
        raise SpecError(f"{path}.value: {exc}") from None
    return _replace(base, column=column, type=type_, value=converted, raw=value)


def _parse_dedupe(base: Operator, raw: Mapping[str, Any], path: str) -> Operator:
    keys = _name_list(raw.get("keys"), f"{path}.keys")
    order_by = "" if raw.get("order_by") is None else _name(raw["order_by"], f"{path}.order_by")
    order = raw.get("order", "desc")
    if order not in ("asc", "desc"):
        raise SpecError(f"{path}.order: one of asc, desc, not {order!r}")
    return _replace(base, columns=keys, column=order_by, descending=order == "desc")


def _parse_aggregate(base: Operator, raw: Mapping[str, Any], path: str) -> Operator:
    group_by = raw.get("group_by")
    group = () if group_by is None else _name_list(group_by, f"{path}.group_by", allow_empty=True)
    metrics = raw.get("metrics")
    if not isinstance(metrics, Mapping) or not metrics:
        raise SpecError(
            f"{path}.metrics: must be a non-empty object of output column -> "
            f'{{count: "*"}}, {{sum: column}}, {{min: column}} or {{max: column}}'
        )
    # In name order: a spec travels as a JSON object (a protobuf Struct),
    # whose key order is not kept; a `select` after orders them otherwise.
    parsed = tuple(
        _parse_metric(f"{path}.metrics", k, metrics[k]) for k in sorted(metrics, key=str)
    )
    clash = sorted({m.name for m in parsed} & set(group))
    if clash:
        raise SpecError(f"{path}.metrics.{clash[0]}: {clash[0]!r} is a group_by column already")
    return _replace(base, columns=group, metrics=parsed)


def _parse_metric(path: str, name: Any, raw: Any) -> Metric:
    where = f"{path}.{_name(name, path)}"
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise SpecError(
            f'{where}: must be one of {{count: "*"}}, {{count: column}}, '
            f"{{sum: column}}, {{min: column}}, {{max: column}}"
        )
    ((function, column),) = raw.items()
    if function not in METRICS:
        raise SpecError(f"{where}: unknown metric {function!r}; use one of {', '.join(METRICS)}")
    if column == "*":
        if function != "count":
            raise SpecError(f'{where}.{function}: "*" is for count only; name a column')
        return Metric(name, function, None)
    return Metric(name, function, _name(column, f"{where}.{function}"))


def _blocking_dict(op: Operator) -> dict[str, Any]:
    if op.op == "dedupe":
        out: dict[str, Any] = {"keys": list(op.columns)}
        if op.column:
            out["order_by"] = op.column
        out["order"] = "desc" if op.descending else "asc"
        return out
    metrics = {m.name: {m.function: m.column or "*"} for m in op.metrics}
    return {"group_by": list(op.columns), "metrics": metrics}


def _infer_type(value: Any, path: str) -> str:
    if value is None:
        raise SpecError(f"{path}.type: a null constant needs a type")
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "text"
    return "json"


# -- the spec and its chains ---------------------------------------------------


@dataclass(frozen=True)
class PipelineSpec:
    operators: tuple[Operator, ...] = ()
    primary_key: dict[str, tuple[str, ...]] = field(default_factory=dict)
    destination: dict[str, str] = field(default_factory=dict)
    # spec.columns: per stream, (column, SQL type) declared over what the source says.
    columns: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    # spec.schema_evolution: what a load does with a column its table lacks.
    schema_evolution: SchemaEvolution = field(default_factory=lambda: SchemaEvolution.ADD_COLUMNS)

    def chain_for(self, stream: str, namespace: str = "") -> Chain:
        ops = tuple(op for op in self.operators if op.applies_to(stream, namespace))
        return Chain(ops, _lookup(self.columns, stream, namespace) or ())

    def primary_key_for(self, stream: str, namespace: str = "") -> tuple[str, ...] | None:
        key: tuple[str, ...] | None = _lookup(self.primary_key, stream, namespace)
        return key

    def destination_for(self, stream: str, namespace: str = "") -> str:
        return self.mapped_destination(stream, namespace) or stream

    def mapped_destination(self, stream: str, namespace: str = "") -> str | None:
        """The name spec.destination gives the stream, if it gives one."""
        name: str | None = _lookup(self.destination, stream, namespace)
        return name

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operators": [op.to_dict() for op in self.operators]}
        if self.primary_key:
            out["primary_key"] = {k: list(v) for k, v in self.primary_key.items()}
        if self.destination:
            out["destination"] = dict(self.destination)
        if self.columns:
            out["columns"] = {k: dict(v) for k, v in self.columns.items()}
        if self.schema_evolution is not SchemaEvolution.ADD_COLUMNS:
            out[EVOLUTION_KEY] = self.schema_evolution.value
        return out


def _lookup(table: Mapping[str, Any], stream: str, namespace: str) -> Any:
    if namespace and f"{namespace}.{stream}" in table:
        return table[f"{namespace}.{stream}"]
    return table.get(stream)


# Operators that see the whole stream before they emit a row (dedupe,
# aggregate): a chain holding one loads its stream in one piece.
BLOCKING_OPS: frozenset[str] = frozenset({"dedupe", "aggregate"})


@dataclass(frozen=True)
class Chain:
    operators: tuple[Operator, ...] = ()
    # The stream's spec.columns: types declared over the source's, applied first.
    declared: tuple[tuple[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.operators and not self.declared

    @property
    def blocking(self) -> bool:
        """True when an operator needs the whole stream before it emits
        (BLOCKING_OPS): such a stream's load resumes from its first part
        (setu_engine/staged/resumable.py)."""
        return any(op.op in BLOCKING_OPS for op in self.operators)

    def plan(self, columns: Sequence[Column], cursor: str | None = None) -> Plan:
        """Checks the chain against the input schema; raises SpecError.
        `cursor`: the stream's incremental cursor, dedupe's default order."""
        held = [op for op in self.operators if op.op in BLOCKING_OPS]
        if not held:
            return _plan_rows(columns, self.declared, self.operators)
        if len(held) > 1:
            raise SpecError(
                f"{held[1].path}: a stream's chain holds one blocking operator "
                f"(dedupe or aggregate); {held[0].path} is one already"
            )
        at = self.operators.index(held[0])
        before = _plan_rows(columns, self.declared, self.operators[:at])
        step = _blocking_step(held[0], before.output, cursor)
        after = _plan_rows(step.output, (), self.operators[at + 1 :])
        return BlockingPlan(before, step, after)


def _plan_rows(
    columns: Sequence[Column], declared: tuple[tuple[str, str], ...], ops: Sequence[Operator]
) -> Plan:
    """Row-by-row operators: each output row depends on one input row."""
    state = _State(tuple(columns))
    for name, sql_type in declared:
        _declare(state, name, sql_type)
    for op in ops:
        try:
            _STEPS[op.op](state, op)
        except ExprError as exc:
            raise SpecError(f"{op.path}.where: {exc}") from None
    if not state.slots:
        raise SpecError("spec.operators: the chain leaves no columns")
    return Plan(tuple(columns), state.slots, state.filters)


def _blocking_step(op: Operator, columns: Sequence[Column], cursor: str | None) -> Step:
    try:
        if op.op == "aggregate":
            return Aggregate.plan(columns, op.path, op.columns, op.metrics)
        order_by = op.column or cursor
        if not order_by:
            raise SpecError(
                f"{op.path}.order_by: required: the stream has no incremental cursor to order by"
            )
        return Dedupe.plan(columns, op.path, op.columns, order_by, op.descending)
    except BlockingError as exc:
        raise SpecError(str(exc)) from None


# -- planning ------------------------------------------------------------------


@dataclass
class _Slot:
    column: Column
    expr: Compiled


class _State:
    def __init__(self, columns: tuple[Column, ...]) -> None:
        refs = column_refs([(c.name, c.type) for c in columns])
        self.slots = [_Slot(c, refs[c.name]) for c in columns]
        self.filters: list[Compiled] = []

    def names(self) -> list[str]:
        return [s.column.name for s in self.slots]

    def find(self, op: Operator, name: str, path: str = "columns") -> _Slot:
        for slot in self.slots:
            if slot.column.name == name:
                return slot
        has = ", ".join(self.names())
        raise SpecError(f"{op.path}.{path}: unknown column {name!r} (stream has: {has})")


def _rename(state: _State, op: Operator) -> None:
    mapping = dict(op.mapping)
    for old in mapping:
        state.find(op, old)
    for slot in state.slots:
        if slot.column.name in mapping:
            c = slot.column
            slot.column = dataclasses.replace(c, name=mapping[c.name])
    names = state.names()
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(f"{op.path}.columns: two columns would be named {dupes[0]!r}")


def _select(state: _State, op: Operator) -> None:
    state.slots = [state.find(op, name) for name in op.columns]


def _drop(state: _State, op: Operator) -> None:
    for name in op.columns:
        state.find(op, name)
    state.slots = [s for s in state.slots if s.column.name not in op.columns]


def _cast(state: _State, op: Operator) -> None:
    for name, to in op.mapping:
        slot = state.find(op, name)
        src = slot.column.type
        if src == to:
            continue
        if not supported(src, to):
            raise SpecError(f"{op.path}.columns.{name}: cannot cast {src} to {to}")
        slot.expr = cast_column(slot.expr, to, name)
        slot.column = Column(name, to, slot.column.nullable)


def _declare(state: _State, name: str, sql_type: str) -> None:
    """A column declared in spec.columns: cast to the neutral type its SQL type
    holds, and created with that SQL type where the destination has types."""
    slot = next((s for s in state.slots if s.column.name == name), None)
    if slot is None:
        has = ", ".join(state.names())
        raise SpecError(f"spec.columns: unknown column {name!r} (stream has: {has})")
    declared = sqltypes.parse(sql_type)
    to, src = declared.neutral, slot.column.type
    if src != to:
        if not supported(src, to):
            raise SpecError(f"spec.columns.{name}: cannot read {src} as {sql_type}")
        slot.expr = cast_column(slot.expr, to, name)
    slot.column = Column(name, to, slot.column.nullable, sqltypes.kept(sql_type, to))


def _filter(state: _State, op: Operator) -> None:
    assert op.node is not None
    env = {s.column.name: s.expr for s in state.slots}
    compiled = compile_filter(op.node, env, cast_literal)
    state.filters.append(compiled)


def _constant(state: _State, op: Operator) -> None:
    if op.column in state.names():
        raise SpecError(f"{op.path}.column: column {op.column!r} already exists")
    expr = constant(op.value, op.type, sql_literal(op.value, op.type))
    state.slots.append(_Slot(Column(op.column, op.type, op.value is None), expr))


def _text_columns(state: _State, op: Operator) -> list[_Slot]:
    slots = [state.find(op, name) for name in op.columns]
    for slot in slots:
        if slot.column.type != "text":
            raise SpecError(
                f"{op.path}.columns: {op.op} needs a text column; cast it first "
                f"({slot.column.name!r} is {slot.column.type})"
            )
    return slots


def _hash(state: _State, op: Operator) -> None:
    for slot in _text_columns(state, op):
        slot.expr = hash_expr(slot.expr)
        # 64 hex digits fit no char(n) or varchar(n) the source declared.
        slot.column = dataclasses.replace(slot.column, sql_type="")


def _mask(state: _State, op: Operator) -> None:
    for slot in _text_columns(state, op):
        slot.expr = mask_expr(slot.expr, op.keep, op.char)


_STEPS: dict[str, Callable[[_State, Operator], None]] = {
    "rename": _rename,
    "select": _select,
    "drop": _drop,
    "cast": _cast,
    "filter": _filter,
    "constant": _constant,
    "hash": _hash,
    "mask": _mask,
}


class Plan:
    """A chain bound to an input schema, ready to run either way."""

    # Needs the whole stream before it emits (BlockingPlan).
    blocking = False

    def __init__(
        self, input: tuple[Column, ...], slots: list[_Slot], filters: list[Compiled]
    ) -> None:
        self.input = input
        self.output = tuple(s.column for s in slots)
        self._exprs = tuple(s.expr for s in slots)
        self._filters = tuple(filters)
        refs = column_refs([(c.name, c.type) for c in input])
        positions = [_position(e, refs, input) for e in self._exprs]
        self.identity = (
            not filters and self.output == input and positions == list(range(len(input)))
        )
        self._project = _projection(positions, self._exprs)
        self._keep = _predicate(self._filters)
        self._read = 0  # rows applied so far: a fault's row number

    def sources(self) -> tuple[str | None, ...]:
        """Per output column, the input column it carries as it is (renamed
        or not), or None where an operator computed it (a cast, a constant)."""
        refs = column_refs([(c.name, c.type) for c in self.input])
        found = (_position(e, refs, self.input) for e in self._exprs)
        return tuple(None if p is None else self.input[p].name for p in found)

    def apply(self, batch: Batch) -> Batch:
        """The chain over a batch; a row it cannot process raises a RowFault
        (permanent) naming its column and row, counted from the stream's start."""
        read = self._read
        self._read += len(batch)
        if self.identity:
            return batch
        keep, project = self._keep, self._project
        try:
            rows = batch if keep is None else [r for r in batch if keep(r)]
            return [project(r) for r in rows]
        except (OperatorError, ArithmeticError, TypeError, AttributeError) as exc:
            raise row_fault(exc, batch, self._one, read) from exc

    def _one(self, row: Row) -> object:
        return self._project(row) if self._keep is None or self._keep(row) else None

    async def apply_stream(self, batches: AsyncIterator[Batch]) -> AsyncIterator[Batch]:
        """The chain over a whole stream, arriving in batches."""
        async for batch in batches:
            yield batch if self.identity else self.apply(batch)

    def select_sql(self, relation: str, extra: str = "") -> str:
        """`extra`: one more select-list item, carried through (BlockingPlan)."""
        columns = ", ".join(
            [
                f"{e.sql} AS {quote_ident(c.name)}"
                for c, e in zip(self.output, self._exprs, strict=True)
            ]
            + ([extra] if extra else [])
        )
        sql = f"SELECT {columns} FROM {relation}"
        if self._filters:
            # CASE fixes the order filters run in: the planner may reorder
            # plain AND-ed quals, and a later filter may only be safe to
            # evaluate (a cast, a division) on rows an earlier one kept.
            where = "true"
            for f in reversed(self._filters):
                where = f"CASE WHEN {f.sql} THEN {where} ELSE false END"
            sql += f" WHERE {where}"
        return sql


class BlockingPlan(Plan):
    """A chain holding a blocking operator (setu_engine/operators/whole_stream.py): the row
    operators before it, the operator over the whole stream, the row
    operators after it (a filter there reads like SQL's HAVING)."""

    blocking = True

    def __init__(self, before: Plan, step: Step, after: Plan) -> None:
        self.input = before.input
        self.output = after.output
        self.identity = False
        self._before, self._step, self._after = before, step, after

    def sources(self) -> tuple[str | None, ...]:
        carried = dict(
            zip((c.name for c in self._before.output), self._before.sources(), strict=True)
        )
        through = [None if s is None else carried[s] for s in self._step.sources()]
        by_name = dict(zip((c.name for c in self._step.output), through, strict=True))
        return tuple(None if s is None else by_name[s] for s in self._after.sources())

    def apply(self, batch: Batch) -> Batch:
        """The chain over a whole stream given as one batch."""
        held = self._step.accumulator()
        held.add(self._before.apply(batch))
        return self._after.apply(list(held.rows()))

    async def apply_stream(self, batches: AsyncIterator[Batch]) -> AsyncIterator[Batch]:
        held = self._step.accumulator()
        size = 1
        async for batch in batches:
            size = max(size, len(batch))
            held.add(self._before.apply(batch))
        rows = held.rows()
        while chunk := list(itertools.islice(rows, size)):
            out = self._after.apply(chunk)
            if out:
                yield out

    def select_sql(self, relation: str, extra: str = "") -> str:
        assert not extra, "a blocking plan is not nested"
        # ctid: the staging table's row order, dedupe's tie-break (whole_stream.py).
        seq = f"ctid AS {quote_ident(SEQ)}"
        before = self._before.select_sql(relation, seq)
        step = self._step.sql(f"({before}) AS _setu_rows")
        return self._after.select_sql(f"({step}) AS _setu_blocked")


def _position(expr: Compiled, refs: dict[str, Compiled], input: tuple[Column, ...]) -> int | None:
    for i, c in enumerate(input):
        if expr is refs[c.name] or (expr.sql == refs[c.name].sql and expr.type == c.type):
            return i
    return None


def _projection(positions: list[int | None], exprs: tuple[Compiled, ...]) -> Callable[[Row], Row]:
    if all(p is not None for p in positions):
        picked = [p for p in positions if p is not None]
        if len(picked) == 1:
            only = picked[0]
            return lambda r: (r[only],)
        getter: Callable[[Row], Row] = itemgetter(*picked)
        return getter
    fns = [e.fn for e in exprs]
    return lambda r: tuple([f(r) for f in fns])


def _predicate(filters: tuple[Compiled, ...]) -> Callable[[Row], bool] | None:
    if not filters:
        return None
    fns = [f.fn for f in filters]
    if len(fns) == 1:
        only = fns[0]
        return lambda r: only(r) is True
    return lambda r: all(f(r) is True for f in fns)


# -- hash and mask --------------------------------------------------------------


def hash_expr(expr: Compiled) -> Compiled:
    inner = expr.fn

    def fn(row: Row) -> str | None:
        value = inner(row)
        return None if value is None else hashlib.sha256(value.encode()).hexdigest()

    return Compiled("text", f"encode(sha256(convert_to({expr.sql}, 'UTF8')), 'hex')", fn)


def mask_expr(expr: Compiled, keep: int, char: str) -> Compiled:
    inner = expr.fn

    def fn(row: Row) -> str | None:
        value = inner(row)
        if value is None:
            return None
        tail = value[-keep:] if keep else ""
        return char * max(len(value) - keep, 0) + tail

    x, c = expr.sql, quote_literal(char)
    sql = (
        f"CASE WHEN {x} IS NULL THEN NULL "
        f"ELSE repeat({c}, greatest(char_length({x}) - {keep}, 0)) || right({x}, {keep}) END"
    )
    return Compiled("text", sql, fn)
