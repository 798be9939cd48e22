"""SQL column types kept exactly: `character varying(20)`, `numeric(5,2)`,
`integer[]`, `timestamp(3) with time zone`.

A neutral type (types.py) says how a value travels; a column's SQL type
says how a SQL destination declares it, so a table lands as its source
declares it instead of as `text` and `numeric`. The text of a SQL type comes
from places Setu does not control (a source's catalog through format_type,
a SQLite file's declarations, a pipeline's spec), so it is never spliced into
DDL: it is parsed against the names below, and only its rendering from
those names and integers ever reaches a statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from setu_engine.errors import SqlTypeError

# PostgreSQL's canonical names (as format_type spells them) -> the neutral
# type their values travel as. The last group is kept exactly at a
# PostgreSQL destination and travels as text.
BASES: dict[str, str] = {
    "boolean": "boolean",
    "smallint": "smallint",
    "integer": "integer",
    "bigint": "bigint",
    "real": "real",
    "double precision": "double",
    "numeric": "numeric",
    "text": "text",
    "character varying": "text",
    "character": "text",
    "bytea": "bytes",
    "date": "date",
    "time without time zone": "time",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
    "uuid": "uuid",
    "json": "json",
    "jsonb": "json",
    "interval": "text",
    "inet": "text",
    "cidr": "text",
    "macaddr": "text",
    "macaddr8": "text",
    "bit": "text",
    "bit varying": "text",
    "xml": "text",
}

# The SQL type each neutral type lands as when nothing more is known: a
# column whose SQL type is this needs no SQL type of its own.
PLAIN: dict[str, str] = {
    "boolean": "boolean",
    "smallint": "smallint",
    "integer": "integer",
    "bigint": "bigint",
    "real": "real",
    "double": "double precision",
    "numeric": "numeric",
    "text": "text",
    "bytes": "bytea",
    "date": "date",
    "time": "time without time zone",
    "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone",
    "uuid": "uuid",
    "json": "jsonb",
}

# Other spellings a person (or SQLite) writes for the names above.
ALIASES: dict[str, str] = {
    "bool": "boolean",
    "int2": "smallint",
    "int": "integer",
    "int4": "integer",
    "int8": "bigint",
    "float4": "real",
    "float8": "double precision",
    "double": "double precision",
    "float": "double precision",
    "decimal": "numeric",
    "string": "text",
    "varchar": "character varying",
    "char": "character",
    "bpchar": "character",
    "nchar": "character",
    "nvarchar": "character varying",
    "bytes": "bytea",
    "time": "time without time zone",
    "timestamp": "timestamp without time zone",
    "datetime": "timestamp without time zone",
    "timestamptz": "timestamp with time zone",
    "varbit": "bit varying",
}

# How many integers a base takes in parentheses, and their bounds.
_MODIFIERS: dict[str, tuple[tuple[int, int], ...]] = {
    "character varying": ((1, 10_485_760),),
    "character": ((1, 10_485_760),),
    "numeric": ((1, 1000), (-1000, 1000)),
    "time without time zone": ((0, 6),),
    "timestamp without time zone": ((0, 6),),
    "timestamp with time zone": ((0, 6),),
    "interval": ((0, 6),),
    "bit": ((1, 83_886_080),),
    "bit varying": ((1, 83_886_080),),
}
# Where PostgreSQL writes the modifier inside the name.
_SPLIT = ("time", "timestamp")

# name, (n) or (p,s), the rest of a name the modifier splits, [] for arrays.
_SHAPE = re.compile(
    r"(?P<head>[a-z][a-z0-9 ]*?)\s*"
    r"(?:\(\s*(?P<args>-?\d+(?:\s*,\s*-?\d+)?)\s*\)\s*(?P<tail>[a-z][a-z ]*?)?)?"
    r"\s*(?P<array>(?:\[\d*\]\s*)*)"
)


@dataclass(frozen=True)
class SqlType:
    base: str
    args: tuple[int, ...] = ()
    array: bool = False

    @property
    def neutral(self) -> str:
        """The neutral type a value of this type travels as (an array as text)."""
        return "text" if self.array else BASES[self.base]

    @property
    def cast_from_staged(self) -> bool:
        """True when a PostgreSQL destination needs an explicit cast from the
        staged neutral type (text into an array, an inet, an interval)."""
        return self.array or (BASES[self.base] == "text" and not self.is_text)

    @property
    def is_text(self) -> bool:
        return not self.array and self.base in ("text", "character varying", "character")

    def render(self) -> str:
        mod = f"({','.join(str(a) for a in self.args)})" if self.args else ""
        head, _, tail = self.base.partition(" ")
        split = mod and head in _SPLIT and tail
        text = f"{head}{mod} {tail}" if split else f"{self.base}{mod}"
        return text + ("[]" if self.array else "")


def parse(text: str) -> SqlType:
    """The SQL type a name means; raises SqlTypeError."""
    words = " ".join(text.strip().lower().split())
    match = _SHAPE.fullmatch(words)
    if match is None or len(words) > 200:
        raise _unknown(text)
    name = " ".join(f"{match['head']} {match['tail'] or ''}".split())
    base = ALIASES.get(name, name)
    if base not in BASES:
        raise _unknown(text)
    args = tuple(int(a) for a in match["args"].split(",")) if match["args"] else ()
    bounds = _MODIFIERS.get(base, ())
    if len(args) > len(bounds) or (base != "numeric" and args and len(args) != len(bounds)):
        raise SqlTypeError(f"type {text!r}: {base} takes no such modifier")
    for value, (low, high) in zip(args, bounds, strict=False):
        if not low <= value <= high:
            raise SqlTypeError(f"type {text!r}: {value} is out of range ({low} to {high})")
    if base == "numeric" and len(args) == 2 and args[1] > args[0]:
        raise SqlTypeError(f"type {text!r}: the scale is larger than the precision")
    return SqlType(base, args, bool(match["array"]))


def canonical(text: str) -> str:
    """The canonical rendering of a SQL type name ("" stays ""); raises SqlTypeError."""
    return parse(text).render() if text else ""


def kept(text: str, neutral: str) -> str:
    """The canonical rendering of a type a catalog reports, when Setu keeps
    it, its values travel as `neutral` and it says more than `neutral` does;
    else "" (the neutral type's own SQL type will do). Never raises: a
    catalog may say anything."""
    try:
        parsed = parse(text)
    except SqlTypeError:
        return ""
    if parsed.neutral != neutral or parsed.render() == PLAIN[neutral]:
        return ""
    return parsed.render()


def _unknown(text: str) -> SqlTypeError:
    names = ", ".join(sorted(BASES))
    return SqlTypeError(
        f"unknown type {text[:60]!r}; use one of {names} (with (n), (p,s) or [] where "
        f"PostgreSQL takes them)"
    )
