"""The engine's neutral type system: what every provider, codec and operator
agrees a column and a value are.

A row is a tuple in schema order; a batch is a list of rows. Each neutral
type has exactly one Python representation (the one asyncpg uses), so a value
read by one provider means the same to every writer:

| type        | Python value                      | PostgreSQL  |
| ----------- | --------------------------------- | ----------- |
| boolean     | bool                              | boolean     |
| smallint    | int                               | smallint    |
| integer     | int                               | integer     |
| bigint      | int                               | bigint      |
| real        | float                             | real        |
| double      | float                             | double precision |
| numeric     | decimal.Decimal                   | numeric     |
| text        | str                               | text        |
| bytes       | bytes                             | bytea       |
| date        | datetime.date                     | date        |
| time        | datetime.time (naive)             | time        |
| timestamp   | datetime.datetime (naive)         | timestamp   |
| timestamptz | datetime.datetime (aware)         | timestamptz |
| uuid        | uuid.UUID                         | uuid        |
| json        | decoded JSON (dict, list, str, …) | jsonb       |

NULL is None in every type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from setu_engine.errors import PermanentError, TypeNameError
from setu_engine.values import sqltypes

if TYPE_CHECKING:
    from setu_engine.values.window import Since

TYPES: tuple[str, ...] = (
    "boolean",
    "smallint",
    "integer",
    "bigint",
    "real",
    "double",
    "numeric",
    "text",
    "bytes",
    "date",
    "time",
    "timestamp",
    "timestamptz",
    "uuid",
    "json",
)

# How a neutral type is spelled in PostgreSQL DDL and casts.
PG_TYPES: dict[str, str] = {
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
    "time": "time",
    "timestamp": "timestamp",
    "timestamptz": "timestamptz",
    "uuid": "uuid",
    "json": "jsonb",
}

# PostgreSQL's own type names (format_type / udt_name) -> neutral. Anything
# else is read as text (the source query casts it), so no value is lost.
FROM_PG: dict[str, str] = {
    "bool": "boolean",
    "boolean": "boolean",
    "int2": "smallint",
    "smallint": "smallint",
    "int4": "integer",
    "integer": "integer",
    "int8": "bigint",
    "bigint": "bigint",
    "float4": "real",
    "real": "real",
    "float8": "double",
    "double precision": "double",
    "numeric": "numeric",
    "text": "text",
    "varchar": "text",
    "character varying": "text",
    "bpchar": "text",
    "character": "text",
    "name": "text",
    "bytea": "bytes",
    "date": "date",
    "time": "time",
    "time without time zone": "time",
    "timestamp": "timestamp",
    "timestamp without time zone": "timestamp",
    "timestamptz": "timestamptz",
    "timestamp with time zone": "timestamptz",
    "uuid": "uuid",
    "json": "json",
    "jsonb": "json",
}

# Aliases users may write in a cast operator or a file's declared columns.
ALIASES: dict[str, str] = {
    "bool": "boolean",
    "int": "bigint",
    "int2": "smallint",
    "int4": "integer",
    "int8": "bigint",
    "float": "double",
    "float4": "real",
    "float8": "double",
    "decimal": "numeric",
    "string": "text",
    "varchar": "text",
    "bytea": "bytes",
    "datetime": "timestamp",
    "jsonb": "json",
}

INTEGERS = frozenset({"smallint", "integer", "bigint"})
NUMBERS = INTEGERS | {"real", "double", "numeric"}


def neutral(name: str) -> str:
    """The neutral type a user-written type name means; raises TypeNameError."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in TYPES:
        raise TypeNameError(f"unknown type {name!r}; use one of {', '.join(TYPES)}")
    return key


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool = True
    # The exact SQL type the source declares, in sqltypes.py's canonical
    # rendering ("character varying(20)", "numeric(5,2)", "integer[]"), whose
    # values travel as `type`; "" when the neutral type says it all.
    sql_type: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "nullable": self.nullable}
        if self.sql_type:
            out["sql_type"] = self.sql_type
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Column:
        type_ = neutral(str(data["type"]))
        sql_type = sqltypes.canonical(str(data.get("sql_type") or ""))
        if sql_type and sqltypes.parse(sql_type).neutral != type_:
            raise TypeNameError(f"column {data['name']!r}: {sql_type} does not hold {type_}")
        return cls(str(data["name"]), type_, bool(data.get("nullable", True)), sql_type)


Row = tuple[Any, ...]
Batch = list[Row]


@dataclass(frozen=True)
class Stream:
    """A stream as a provider offers it: a table, or a file."""

    name: str
    columns: tuple[Column, ...]
    namespace: str = ""
    primary_key: tuple[str, ...] = ()
    row_estimate: int = 0
    # Provider-specific locator (a qualified table name, a file path).
    locator: dict[str, Any] = field(default_factory=dict, compare=False)
    # An incremental read's window (setu_engine/values/window.py); None: read all.
    since: Since | None = field(default=None, compare=False)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "columns": [c.to_dict() for c in self.columns],
            "primary_key": list(self.primary_key),
            "row_estimate": self.row_estimate,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Stream:
        return cls(
            name=str(data["name"]),
            namespace=str(data.get("namespace", "")),
            columns=tuple(Column.from_dict(c) for c in data.get("columns", [])),
            primary_key=tuple(data.get("primary_key", [])),
            row_estimate=int(data.get("row_estimate", 0)),
        )


def columns_by_name(columns: Sequence[Column]) -> dict[str, Column]:
    return {c.name: c for c in columns}


def find_stream(streams: Sequence[Stream], wanted: str) -> Stream:
    """A stream by `name` or `namespace.name`; raises ProviderError."""
    for stream in streams:
        if wanted in (stream.name, f"{stream.namespace}.{stream.name}"):
            return stream
    known = ", ".join(qualified(s) for s in streams) or "none"
    raise PermanentError(f"stream {wanted!r} not found (the connection offers: {known})")


def qualified(stream: Stream) -> str:
    return f"{stream.namespace}.{stream.name}" if stream.namespace else stream.name
