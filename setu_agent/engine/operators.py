"""The operator chain of a pipeline spec, run two ways with one result.

`parse_spec` validates a spec document's structure (no schema needed);
`Chain.plan(columns)` checks it against a stream's input schema and compiles
every output column (and every filter) into an `expr.Compiled`: a Python
function of an input row plus the SQL that computes the same value from the
staging table's columns. `Plan.apply` runs the functions over a batch;
`Plan.select_sql` is one `SELECT ... FROM <relation> WHERE ...` for
PostgreSQL. Because every column is an expression of the *input* row, a
filter after a cast reads the cast value in both ways, and the filters are
tested before any output column is computed (as PostgreSQL evaluates WHERE
before the select list), so a value that fails to cast in a filtered-out row
raises in neither.

Casts follow PostgreSQL's CAST where the two sides can agree: text input is
accepted in its canonical forms only (a regular expression gates it in the
SQL too, so PostgreSQL's extra input forms are refused by both, e.g. 'today'
or '0x1F'). Time zones: the compiled SQL does not depend on the session's
TimeZone or DateStyle: timestamp <-> timestamptz conversions are written
`AT TIME ZONE 'UTC'`, a time-zone-less text read as timestamptz means UTC,
and timestamps are rendered as text with to_char (timestamptz in UTC, with
'+00'); bytea renders as '\\x' || hex whatever bytea_output says.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import re
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from operator import itemgetter
from typing import Any

from setu_agent.engine.expr import (
    NUMERIC_CTX,
    Compiled,
    ExprError,
    Node,
    OperatorError,
    check_int,
    column_refs,
    compile_filter,
    constant,
    parse,
    quote_ident,
    quote_literal,
)
from setu_agent.engine.types import (
    INTEGERS,
    NUMBERS,
    PG_TYPES,
    Batch,
    Column,
    Row,
    TypeNameError,
    neutral,
)

__all__ = [
    "Chain",
    "Operator",
    "OperatorError",
    "PipelineSpec",
    "Plan",
    "SpecError",
    "parse_spec",
]


class SpecError(ValueError):
    """The spec is wrong; the message names the path, e.g.
    "spec.operators[2].columns: unknown column 'x' (stream has: id, name)"."""


OPS = ("rename", "select", "drop", "cast", "filter", "constant", "hash", "mask")
_FIELDS: dict[str, frozenset[str]] = {
    "rename": frozenset({"columns"}),
    "select": frozenset({"columns"}),
    "drop": frozenset({"columns"}),
    "cast": frozenset({"columns"}),
    "filter": frozenset({"where"}),
    "constant": frozenset({"column", "value", "type"}),
    "hash": frozenset({"columns"}),
    "mask": frozenset({"columns", "keep", "char"}),
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
    unknown = set(doc) - {"operators", "primary_key", "destination"}
    if unknown:
        raise SpecError(f"spec: unknown field {sorted(unknown)[0]!r}")
    raw_ops = doc.get("operators")
    raw_ops = [] if raw_ops is None else raw_ops
    if not isinstance(raw_ops, list):
        raise SpecError("spec.operators: must be a list")
    operators = tuple(_parse_operator(i, op) for i, op in enumerate(raw_ops))
    keys = _string_map(doc.get("primary_key"), "spec.primary_key", _name_list)
    destinations = _string_map(doc.get("destination"), "spec.destination", _name)
    return PipelineSpec(operators, keys, destinations)


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

    def chain_for(self, stream: str, namespace: str = "") -> Chain:
        return Chain(tuple(op for op in self.operators if op.applies_to(stream, namespace)))

    def primary_key_for(self, stream: str, namespace: str = "") -> tuple[str, ...] | None:
        key: tuple[str, ...] | None = _lookup(self.primary_key, stream, namespace)
        return key

    def destination_for(self, stream: str, namespace: str = "") -> str:
        return _lookup(self.destination, stream, namespace) or stream

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operators": [op.to_dict() for op in self.operators]}
        if self.primary_key:
            out["primary_key"] = {k: list(v) for k, v in self.primary_key.items()}
        if self.destination:
            out["destination"] = dict(self.destination)
        return out


def _lookup(table: Mapping[str, Any], stream: str, namespace: str) -> Any:
    if namespace and f"{namespace}.{stream}" in table:
        return table[f"{namespace}.{stream}"]
    return table.get(stream)


@dataclass(frozen=True)
class Chain:
    operators: tuple[Operator, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.operators

    def plan(self, columns: Sequence[Column]) -> Plan:
        """Checks the chain against the input schema; raises SpecError."""
        state = _State(tuple(columns))
        for op in self.operators:
            try:
                _STEPS[op.op](state, op)
            except ExprError as exc:
                raise SpecError(f"{op.path}.where: {exc}") from None
        if not state.slots:
            raise SpecError("spec.operators: the chain leaves no columns")
        return Plan(tuple(columns), state.slots, state.filters)


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
            slot.column = Column(mapping[c.name], c.type, c.nullable)
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

    def apply(self, batch: Batch) -> Batch:
        if self.identity:
            return batch
        keep, project = self._keep, self._project
        rows = batch if keep is None else [r for r in batch if keep(r)]
        return [project(r) for r in rows]

    def select_sql(self, relation: str) -> str:
        columns = ", ".join(
            f"{e.sql} AS {quote_ident(c.name)}"
            for c, e in zip(self.output, self._exprs, strict=True)
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


# -- casts -----------------------------------------------------------------------
# Each supported (source, target) pair has a Python converter of a non-null
# value and an SQL template; both raise on a value PostgreSQL would refuse.

Conv = Callable[[Any], Any]
SqlOf = Callable[[str], str]
UTC = dt.UTC

_INT = r"[+-]?[0-9]+"
_DEC = r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?"
_FLOAT = _DEC + r"|NaN|[+-]?Infinity"
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,6})?)?"
_TS = _DATE + r"([ T]" + _TIME + ")?"
_TSTZ = _DATE + r"[ T]" + _TIME + r"(Z|[+-]([01][0-9]|2[0-3])(:?[0-5][0-9])?)"
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_PARTS = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[ T]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]+))?)?)?"
    r"(Z|([+-])([0-9]{2}):?([0-9]{2})?)?"
)


def _gate(pattern: str, pg_type: str) -> SqlOf:
    """CAST of text that only forms both sides read alike reach: any other
    text is made to fail an integer cast ('invalid date: today' is no integer),
    since a prefix alone may still parse as a date ('#today' does)."""
    regex = quote_literal(f"^({pattern})$")
    invalid = quote_literal(f"invalid {pg_type}: ")
    return lambda x: (
        f"CAST(CASE WHEN {x} ~ {regex} THEN {x} "
        f"ELSE CAST(CAST({invalid} || {x} AS integer) AS text) END AS {pg_type})"
    )


def _matching(pattern: str, to: str) -> Callable[[str], None]:
    compiled = re.compile(pattern)

    def check(text: str) -> None:
        if not compiled.fullmatch(text):
            raise OperatorError(f"invalid input syntax for type {to}: {text!r}")

    return check


def _f32(value: float) -> float:
    try:
        narrowed: float = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        narrowed = math.inf
    if math.isinf(narrowed) and not math.isinf(value):
        raise OperatorError(f"value out of range: overflow ({value!r})")
    if narrowed == 0 and value != 0:
        raise OperatorError(f"value out of range: underflow ({value!r})")
    return narrowed


def _text_to_float(text: str) -> float:
    _matching(_FLOAT, "double precision")(text)
    value = float(text)
    mantissa = re.split("[eE]", text)[0]
    if value in (float("inf"), float("-inf")) and "Infinity" not in text:
        raise OperatorError(f"{text!r} is out of range for type double precision")
    if value == 0 and any(ch in "123456789" for ch in mantissa):
        raise OperatorError(f"{text!r} is out of range for type double precision")
    return value


def _text_to_numeric(text: str) -> Decimal:
    _matching(_DEC, "numeric")(text)
    return _normal(Decimal(text))


def _normal(d: Decimal) -> Decimal:
    """PostgreSQL's numeric keeps no positive exponent: 1E+3 is 1000."""
    exponent = d.as_tuple().exponent
    if isinstance(exponent, int) and exponent > 0:
        return NUMERIC_CTX.quantize(d, Decimal(1))
    return d


def _text_to_int(to: str) -> Conv:
    check = _matching(_INT, to)

    def conv(text: str) -> int:
        check(text)
        return check_int(int(text), to)

    return conv


def _parts(text: str) -> tuple[dt.datetime, re.Match[str]]:
    m = _PARTS.fullmatch(text)
    assert m is not None
    y, mo, d, h, mi, s, frac = m.groups()[:7]
    micro = int((frac or "").ljust(6, "0"))
    try:
        value = dt.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), micro)
    except ValueError as exc:
        raise OperatorError(f"date/time field value out of range: {text!r}") from exc
    return value, m


def _text_to_date(text: str) -> dt.date:
    _matching(_DATE, "date")(text)
    return _parts(text)[0].date()


def _text_to_time(text: str) -> dt.time:
    _matching(_TIME, "time")(text)
    return _parts("2000-01-01 " + text)[0].time()


def _text_to_timestamp(text: str) -> dt.datetime:
    _matching(_TS, "timestamp")(text)
    return _parts(text)[0]


def _text_to_timestamptz(text: str) -> dt.datetime:
    if re.fullmatch(_TSTZ, text):
        value, m = _parts(text)
        sign, hours, minutes = m.group(9), m.group(10), m.group(11)
        offset = dt.timedelta(hours=int(hours or 0), minutes=int(minutes or 0))
        value -= -offset if sign == "-" else offset
    else:
        value = _text_to_timestamp(text)
    return value.replace(tzinfo=UTC)


def _sql_text_to_timestamptz(x: str) -> str:
    naive = _gate(_TS, "timestamp")(x)
    pattern = quote_literal(f"^({_TSTZ})$")
    return (
        f"CASE WHEN {x} ~ {pattern} THEN CAST({x} AS timestamptz) "
        f"ELSE ({naive} AT TIME ZONE 'UTC') END"
    )


def _text_to_uuid(text: str) -> uuid.UUID:
    _matching(_UUID, "uuid")(text)
    return uuid.UUID(text)


def _text_to_bool(text: str) -> bool:
    value = text.strip(" \t\n\r\f\v").lower()
    # PostgreSQL's parse_bool: any prefix of true/false/yes/no, on/off, 1/0.
    if value and value[0] in "tfyn":
        word = {"t": "true", "f": "false", "y": "yes", "n": "no"}[value[0]]
        if word.startswith(value):
            return value[0] in "ty"
    if value in ("on", "1"):
        return True
    if value in ("of", "off", "0"):
        return False
    raise OperatorError(f"invalid input syntax for type boolean: {text!r}")


def _reject_constant(name: str) -> Any:
    raise OperatorError(f"invalid input syntax for type json: {name}")


def _check_json(value: Any) -> Any:
    if isinstance(value, str):
        if "\x00" in value:
            raise OperatorError("unsupported Unicode escape sequence \\u0000 in json")
        value.encode("utf-8")
    elif isinstance(value, float) and value in (float("inf"), float("-inf")):
        raise OperatorError("json number out of range")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_json(k)
            _check_json(v)
    elif isinstance(value, list):
        for v in value:
            _check_json(v)
    return value


def _text_to_json(text: str) -> Any:
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise OperatorError(f"invalid input syntax for type json: {exc}") from None
    return _check_json(value)


# Value -> PostgreSQL's text output.


def _float_text(value: float, threshold: int, digits: str) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0" if str(value).startswith("-") else "0"
    d = Decimal(digits).normalize(NUMERIC_CTX)
    exp = d.adjusted()
    if -4 <= exp < threshold:
        return format(d, "f")
    sign, ds, _ = d.as_tuple()
    mantissa = str(ds[0]) + ("." + "".join(map(str, ds[1:])) if len(ds) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"


def _double_text(value: float) -> str:
    return _float_text(value, 15, repr(value))


def _real_text(value: float) -> str:
    shortest = repr(value)
    for precision in range(1, 10):
        candidate = f"{value:.{precision - 1}e}"
        if value != value or struct.unpack("f", struct.pack("f", float(candidate)))[0] == value:
            shortest = candidate
            break
    return _float_text(value, 6, shortest)


def _numeric_text(value: Decimal) -> str:
    if value.is_nan():
        return "NaN"
    if value.is_infinite():
        return "Infinity" if value > 0 else "-Infinity"
    text = format(_normal(value), "f")
    return text[1:] if text.startswith("-") and value == 0 else text


def _fraction(micro: int) -> str:
    return f".{micro:06d}".rstrip("0") if micro else ""


def _time_text(value: dt.time) -> str:
    return value.strftime("%H:%M:%S") + _fraction(value.microsecond)


def _timestamp_text(value: dt.datetime) -> str:
    return f"{value.date().isoformat()} {_time_text(value.time())}"


def _timestamptz_text(value: dt.datetime) -> str:
    return _timestamp_text(value.astimezone(UTC).replace(tzinfo=None)) + "+00"


def _json_text(value: Any) -> str:
    """jsonb's output: keys by (byte length, bytes), numbers as numeric."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        inner = ", ".join(f"{_json_text(k)}: {_json_text(value[k])}" for k in keys)
        return "{" + inner + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_json_text(v) for v in value) + "]"
    if isinstance(value, float):
        return _numeric_text(_normal(Decimal(repr(value))))
    return json.dumps(value, ensure_ascii=False)


TEXT_OUT: dict[str, Conv] = {
    "boolean": lambda v: "true" if v else "false",
    "smallint": str,
    "integer": str,
    "bigint": str,
    "real": _real_text,
    "double": _double_text,
    "numeric": _numeric_text,
    "bytes": lambda v: "\\x" + bytes(v).hex(),
    "date": lambda v: v.isoformat(),
    "time": _time_text,
    "timestamp": _timestamp_text,
    "timestamptz": _timestamptz_text,
    "uuid": str,
    "json": _json_text,
}


def _to_char(x: str) -> str:
    return f"(to_char({x}, 'YYYY-MM-DD HH24:MI:SS') || rtrim(rtrim(to_char({x}, '.US'), '0'), '.'))"


_SQL_TEXT_OUT: dict[str, SqlOf] = {
    "bytes": lambda x: f"(E'\\\\x' || encode({x}, 'hex'))",
    "date": lambda x: f"to_char({x}, 'YYYY-MM-DD')",
    "timestamp": _to_char,
    "timestamptz": lambda x: f"({_to_char(f'({x} AT TIME ZONE {_UTC})')} || '+00')",
}
_UTC = "'UTC'"


# Number -> number.


def _to_int(to: str) -> Callable[[str], Conv]:
    def from_type(src: str) -> Conv:
        def conv(value: Any) -> int:
            if src in ("real", "double"):
                if value != value or value in (float("inf"), float("-inf")):
                    raise OperatorError(f"{to} out of range")
                return check_int(round(value), to)
            if src == "numeric":
                if not value.is_finite():
                    raise OperatorError(f"cannot convert {value} to {to}")
                return check_int(int(value.to_integral_value(ROUND_HALF_UP)), to)
            return check_int(value, to)

        return conv

    return from_type


def _to_double(src: str) -> Conv:
    if src == "numeric":
        return _numeric_float
    return float


def _numeric_float(value: Decimal) -> float:
    result = float(value)
    if value.is_finite() and (result in (float("inf"), float("-inf"))):
        raise OperatorError(f"value out of range: overflow ({value})")
    if value.is_finite() and value != 0 and result == 0:
        raise OperatorError(f"value out of range: underflow ({value})")
    return result


def _to_real(src: str) -> Conv:
    to_double = _to_double(src)
    return lambda v: _f32(to_double(v))


def _to_numeric(src: str) -> Conv:
    if src in INTEGERS:
        return Decimal
    # PostgreSQL prints the float with DBL_DIG/FLT_DIG digits, then reads it.
    digits = 15 if src == "double" else 6

    def conv(value: float) -> Decimal:
        if value != value:
            return Decimal("NaN")
        if value in (float("inf"), float("-inf")):
            return Decimal(value)
        return _normal(Decimal(f"{value:.{digits}g}"))

    return conv


def _build_casts() -> dict[tuple[str, str], tuple[Conv, SqlOf]]:
    table: dict[tuple[str, str], tuple[Conv, SqlOf]] = {}

    def plain(to: str) -> SqlOf:
        return lambda x: f"CAST({x} AS {PG_TYPES[to]})"

    for src in NUMBERS:
        for to in NUMBERS - {src}:
            if to in INTEGERS:
                conv = _to_int(to)(src)
            elif to == "double":
                conv = _to_double(src)
            elif to == "real":
                conv = _to_real(src)
            else:
                conv = _to_numeric(src)
            table[src, to] = (conv, plain(to))
    for to in INTEGERS:
        table["text", to] = (_text_to_int(to), _gate(_INT, to))
    table["text", "numeric"] = (_text_to_numeric, _gate(_DEC, "numeric"))
    table["text", "double"] = (_text_to_float, _gate(_FLOAT, "double precision"))
    table["text", "real"] = (lambda t: _f32(_text_to_float(t)), _gate(_FLOAT, "real"))
    table["text", "boolean"] = (_text_to_bool, plain("boolean"))
    table["text", "date"] = (_text_to_date, _gate(_DATE, "date"))
    table["text", "time"] = (_text_to_time, _gate(_TIME, "time"))
    table["text", "timestamp"] = (_text_to_timestamp, _gate(_TS, "timestamp"))
    table["text", "timestamptz"] = (_text_to_timestamptz, _sql_text_to_timestamptz)
    table["text", "uuid"] = (_text_to_uuid, _gate(_UUID, "uuid"))
    table["text", "json"] = (_text_to_json, plain("json"))
    for src, out in TEXT_OUT.items():
        table[src, "text"] = (out, _SQL_TEXT_OUT.get(src, plain("text")))
    utc = f" AT TIME ZONE {_UTC}"
    table["date", "timestamp"] = (lambda d: dt.datetime(d.year, d.month, d.day), plain("timestamp"))
    table["date", "timestamptz"] = (
        lambda d: dt.datetime(d.year, d.month, d.day, tzinfo=UTC),
        lambda x: f"(CAST({x} AS timestamp){utc})",
    )
    table["timestamp", "date"] = (lambda v: v.date(), plain("date"))
    table["timestamp", "time"] = (lambda v: v.time(), plain("time"))
    table["timestamptz", "date"] = (
        lambda v: v.astimezone(UTC).date(),
        lambda x: f"CAST(({x}{utc}) AS date)",
    )
    table["timestamp", "timestamptz"] = (lambda v: v.replace(tzinfo=UTC), lambda x: f"({x}{utc})")
    table["timestamptz", "timestamp"] = (
        lambda v: v.astimezone(UTC).replace(tzinfo=None),
        lambda x: f"({x}{utc})",
    )
    return table


_CASTS = _build_casts()


def supported(src: str, to: str) -> bool:
    return src == to or (src, to) in _CASTS


def cast_column(expr: Compiled, to: str, name: str) -> Compiled:
    """`expr` cast to `to`; a value that cannot be cast raises OperatorError
    naming the column and the value."""
    conv, sql_of = _CASTS[expr.type, to]
    inner = expr.fn

    def fn(row: Row) -> Any:
        value = inner(row)
        if value is None:
            return None
        try:
            return conv(value)
        except (ValueError, ArithmeticError) as exc:
            raise OperatorError(f"column {name!r}: cannot cast {value!r} to {to}: {exc}") from None

    return Compiled(to, sql_of(expr.sql), fn, expr.const)


def cast_literal(c: Compiled, to: str) -> Compiled:
    """A constant read as `to` at plan time (expr's coercion of literals)."""
    src = "text" if c.type == "unknown" else c.type
    value = c.value()
    if value is not None and src != to:
        if (src, to) not in _CASTS:
            raise OperatorError(f"cannot cast {src} to {to}")
        value = _CASTS[src, to][0](value)
    return constant(value, to, sql_literal(value, to))


def sql_literal(value: Any, type_: str) -> str:
    pg = PG_TYPES[type_]
    if value is None:
        return f"CAST(NULL AS {pg})"
    text = value if type_ == "text" else TEXT_OUT[type_](value)
    return f"CAST({quote_literal(text)} AS {pg})"


def from_json(value: Any, type_: str) -> Any:
    """A constant operator's JSON value as the neutral value of `type_`."""
    if value is None:
        return None
    if type_ == "json":
        return _check_json(value)
    if isinstance(value, bool):
        if type_ != "boolean":
            raise ValueError(f"a boolean cannot be a {type_}")
        return value
    if isinstance(value, int | float):
        src = "bigint" if isinstance(value, int) else "double"
        if type_ not in NUMBERS:
            raise ValueError(f"a number cannot be a {type_}")
        if isinstance(value, int) and type_ in INTEGERS:
            return check_int(value, type_)
        if isinstance(value, int) and type_ == "numeric":
            return Decimal(value)
        return _CASTS[src, type_][0](value) if src != type_ else value
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("a string cannot contain a NUL character")
        if type_ == "text":
            return value
        if ("text", type_) not in _CASTS:
            raise ValueError(f"a string cannot be read as {type_}")
        return _CASTS["text", type_][0](value)
    raise ValueError(f"a {type(value).__name__} cannot be a {type_}")


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
