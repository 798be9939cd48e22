"""Casts between neutral types, run two ways with one result: each supported
(source, target) pair has a Python converter of a non-null value and the SQL
that computes the same cast in PostgreSQL (both raise on a value PostgreSQL
would refuse), plus PostgreSQL's text output of every type (what a cast to
text gives).

Casts follow PostgreSQL's CAST where the two sides can agree: text input is
accepted in its canonical forms only (a regular expression gates it in the
SQL too, so PostgreSQL's extra input forms are refused by both, e.g. 'today'
or '0x1F'). Time zones: the compiled SQL does not depend on the session's
TimeZone or DateStyle: timestamp <-> timestamptz conversions are written
`AT TIME ZONE 'UTC'`, a time-zone-less text read as timestamptz means UTC,
and timestamps are rendered as text with to_char (timestamptz in UTC, with
'+00'); bytea renders as '\\x' || hex whatever bytea_output says.

Separate from chain.py because it depends only on expr_compile and
types, not on specs or plans: it is the type system's conversion table, which
the cast and constant operators and the filter language's literal coercion
all use.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import struct
import uuid
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from setu_engine.errors import CastError, OperatorError
from setu_engine.filters.expr_compile import (
    NUMERIC_CTX,
    Compiled,
    check_int,
    constant,
    quote_literal,
)
from setu_engine.values.special import INFINITIES, JSON_NULL, Infinite
from setu_engine.values.types import INTEGERS, NUMBERS, PG_TYPES, Row

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


# PostgreSQL's ±infinity of a date or timestamp (values/special.py's markers), in
# its canonical spelling: a text cast reads it, a cast to text writes it,
# and casts between date, timestamp and timestamptz keep it.
_INFINITE = r"|infinity|-infinity"


def _or_infinite(conv: Callable[[str], Any]) -> Conv:
    def read(text: str) -> Any:
        marker = INFINITIES.get(text) if text in ("infinity", "-infinity") else None
        return marker if marker is not None else conv(text)

    return read


def _keeping_infinite(conv: Conv) -> Conv:
    """`conv` of a finite value; an infinity stays the same marker."""
    return lambda v: v if isinstance(v, Infinite) else conv(v)


def _time_of(value: dt.datetime | Infinite) -> dt.time:
    if isinstance(value, Infinite):
        raise OperatorError(f"{value.text} has no time of day")
    return value.time()


def _sql_time_of(x: str) -> str:
    # PostgreSQL gives NULL for infinity::time; reading 'infinity' as a time
    # raises instead, as the Python side does.
    return (
        f"CAST(CASE WHEN isfinite({x}) THEN CAST(CAST({x} AS time) AS text) "
        f"ELSE CAST({x} AS text) END AS time)"
    )


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
    naive = _gate(_TS + _INFINITE, "timestamp")(x)
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
    # 'null' is JSON's null, a value (SQL NULL is None).
    return JSON_NULL if value is None else _check_json(value)


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
    if value is JSON_NULL:
        return "null"
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
    "date": lambda v: v.text if isinstance(v, Infinite) else v.isoformat(),
    "time": _time_text,
    "timestamp": lambda v: v.text if isinstance(v, Infinite) else _timestamp_text(v),
    "timestamptz": lambda v: v.text if isinstance(v, Infinite) else _timestamptz_text(v),
    "uuid": str,
    "json": _json_text,
}


def _to_char(x: str) -> str:
    return f"(to_char({x}, 'YYYY-MM-DD HH24:MI:SS') || rtrim(rtrim(to_char({x}, '.US'), '0'), '.'))"


def _finite_text(to_char: SqlOf) -> SqlOf:
    # to_char gives NULL for an infinity; its own text is 'infinity'.
    return lambda x: f"(CASE WHEN isfinite({x}) THEN {to_char(x)} ELSE CAST({x} AS text) END)"


_SQL_TEXT_OUT: dict[str, SqlOf] = {
    "bytes": lambda x: f"(E'\\\\x' || encode({x}, 'hex'))",
    "date": _finite_text(lambda x: f"to_char({x}, 'YYYY-MM-DD')"),
    "timestamp": _finite_text(_to_char),
    "timestamptz": _finite_text(lambda x: f"({_to_char(f'({x} AT TIME ZONE {_UTC})')} || '+00')"),
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
    table["text", "date"] = (_or_infinite(_text_to_date), _gate(_DATE + _INFINITE, "date"))
    table["text", "time"] = (_text_to_time, _gate(_TIME, "time"))
    table["text", "timestamp"] = (
        _or_infinite(_text_to_timestamp),
        _gate(_TS + _INFINITE, "timestamp"),
    )
    table["text", "timestamptz"] = (
        _or_infinite(_text_to_timestamptz),
        _sql_text_to_timestamptz,
    )
    table["text", "uuid"] = (_text_to_uuid, _gate(_UUID, "uuid"))
    table["text", "json"] = (_text_to_json, plain("json"))
    for src, out in TEXT_OUT.items():
        table[src, "text"] = (out, _SQL_TEXT_OUT.get(src, plain("text")))
    utc = f" AT TIME ZONE {_UTC}"
    keep = _keeping_infinite
    table["date", "timestamp"] = (
        keep(lambda d: dt.datetime(d.year, d.month, d.day)),
        plain("timestamp"),
    )
    table["date", "timestamptz"] = (
        keep(lambda d: dt.datetime(d.year, d.month, d.day, tzinfo=UTC)),
        lambda x: f"(CAST({x} AS timestamp){utc})",
    )
    table["timestamp", "date"] = (keep(lambda v: v.date()), plain("date"))
    table["timestamp", "time"] = (_time_of, _sql_time_of)
    table["timestamptz", "date"] = (
        keep(lambda v: v.astimezone(UTC).date()),
        lambda x: f"CAST(({x}{utc}) AS date)",
    )
    table["timestamp", "timestamptz"] = (
        keep(lambda v: v.replace(tzinfo=UTC)),
        lambda x: f"({x}{utc})",
    )
    table["timestamptz", "timestamp"] = (
        keep(lambda v: v.astimezone(UTC).replace(tzinfo=None)),
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
            raise CastError(f"cannot cast to {to} ({exc})", name, value) from None

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
