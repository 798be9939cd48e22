"""What a stream's load would do to its destination, and what would stop it.

One assessment serves two callers, so a dry run and the real load say the
same thing in the same words:

- a dry run (`inspect_plans`) reports it: per stream, the destination's
  actions (create schema, create table, add columns, write into the
  existing table) and every incompatibility found;
- a load (`prepare`, called by movement/transfer.py before every write) acts on
  it: refuses, as a permanent failure, what it cannot apply (a column type
  change, columns it may not add, a key the write mode needs), or answers
  the schema changes the load makes (a missing schema to create, the
  columns the table lacks to add, under `schema_evolution: add_columns`,
  the default). The writer makes them inside the load's own transaction,
  so they commit with the rows or not at all (`said` words them for the
  timeline once the load committed).

A destination takes part by implementing `InspectableDestination`
(PostgreSQL and SQLite); any other (files) is written as it is: a file is
replaced or appended whole, with no table to compare with.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, cast, runtime_checkable

from setu_engine.capabilities import capabilities_of
from setu_engine.errors import PermanentError
from setu_engine.kinds import WriteMode
from setu_engine.operators.chain import SchemaEvolution
from setu_engine.values.types import Column


@dataclass(frozen=True)
class SchemaChanges:
    """What a load changes in its destination's shape ahead of its rows
    (setu_engine/planning/destination_plan.py): a schema to create, nullable columns to
    add to the existing table. A destination with transactional DDL makes
    them inside the load's transaction, so they commit with the rows or not
    at all: a failed run leaves the shape as it was."""

    # How people name the target ("edge"."orders", 'orders').
    target: str
    schema: str | None = None
    columns: tuple[Column, ...] = ()

    def __bool__(self) -> bool:
        return self.schema is not None or bool(self.columns)


@dataclass(frozen=True)
class DestinationColumn:
    """A column the destination table has."""

    name: str
    # As the destination names it ("integer", "character varying(20)").
    type: str
    # Its neutral type, None when it has none (then it is not judged).
    neutral: str | None
    # NOT NULL without a default: a row must bring a value.
    required: bool = False


@dataclass(frozen=True)
class TableShape:
    """What the destination holds where a stream would land."""

    # How people name the target ("edge"."orders", 'orders').
    target: str
    # The schema to create first, when the stream lands in a missing one.
    missing_schema: str | None = None
    # None when there is no table yet.
    columns: tuple[DestinationColumn, ...] | None = None
    # The column sets of its primary key and unique indexes.
    unique_keys: tuple[frozenset[str], ...] = ()


@runtime_checkable
class InspectableDestination(Protocol):
    """A destination with tables: it says what a target holds, and can
    create a schema and add columns ahead of a load."""

    async def inspect_table(self, table: str, schema: str | None) -> TableShape: ...

    async def create_schema(self, schema: str) -> None: ...

    async def add_columns(self, table: str, schema: str | None, columns: Sequence[Column]) -> None:
        """Adds the columns, nullable (rows already there have no value)."""
        ...


@dataclass(frozen=True)
class Landing:
    """One stream as it would land: its name, where, and the columns and key
    after the operator chain."""

    stream: str
    table: str
    schema: str | None
    columns: tuple[Column, ...]
    key: tuple[str, ...]


@dataclass(frozen=True)
class Assessment:
    actions: tuple[str, ...]
    # Columns the load adds (schema_evolution add_columns).
    added: tuple[Column, ...] = ()
    incompatibilities: tuple[str, ...] = ()


# A stream's type that an existing column of another type still takes as it
# is (a widening, or text that takes any value's text); anything else is a
# type change, which a load never applies on its own.
WIDENS: dict[str, frozenset[str]] = {
    "smallint": frozenset({"integer", "bigint", "numeric", "real", "double"}),
    "integer": frozenset({"bigint", "numeric", "double"}),
    "bigint": frozenset({"numeric"}),
    "real": frozenset({"double", "numeric"}),
    "date": frozenset({"timestamp", "timestamptz"}),
    "timestamp": frozenset({"timestamptz"}),
}


def takes(existing: DestinationColumn, column: Column) -> bool:
    """True when the existing column holds the stream's values as they are."""
    if existing.neutral is None or existing.neutral in (column.type, "text"):
        return True
    return existing.neutral in WIDENS.get(column.type, frozenset())


def assess(
    landing: Landing, shape: TableShape, mode: WriteMode, evolution: SchemaEvolution
) -> Assessment:
    """What the load of `landing` would do to `shape`, and what stops it."""
    actions = [f"create schema {landing.schema}"] if shape.missing_schema else []
    if shape.columns is None:
        return Assessment((*actions, f"create table {shape.target}"))
    existing = {c.name: c for c in shape.columns}
    problems = [
        type_change(landing.stream, shape.target, existing[c.name], c)
        for c in landing.columns
        if c.name in existing and not takes(existing[c.name], c)
    ]
    missing = tuple(c for c in landing.columns if c.name not in existing)
    added: tuple[Column, ...] = ()
    if missing and evolution is SchemaEvolution.FAIL:
        problems.append(missing_columns(landing.stream, shape.target, missing))
    elif missing:
        added = tuple(replace(c, nullable=True) for c in missing)
        actions.append(f"add column(s) {_described(added)}")
    sent = {c.name for c in landing.columns}
    problems += [
        f"stream {landing.stream}: destination column {c.name} of {shape.target} is NOT NULL "
        f"without a default, and the stream does not send it (send it, or give it a default)"
        for c in shape.columns
        if c.required and c.name not in sent
    ]
    if mode.needs_key and landing.key and frozenset(landing.key) not in shape.unique_keys:
        problems.append(
            f"stream {landing.stream}: write mode {mode.value} into {shape.target} needs a "
            f"primary key or unique index on ({', '.join(landing.key)}): add one, or use "
            f"write_mode append or overwrite"
        )
    actions.append(f"{_verb(mode)} the existing table {shape.target}")
    return Assessment(tuple(actions), added, tuple(problems))


def type_change(stream: str, target: str, existing: DestinationColumn, column: Column) -> str:
    return (
        f"stream {stream}, column {column.name}: the destination column of {target} is "
        f"{existing.type} and the stream now sends {column.type} ({existing.type} → "
        f"{column.type}); a load never changes a column's type: alter the column, drop the "
        f"table so the load creates it, or cast the column in the pipeline spec"
    )


def missing_columns(stream: str, target: str, missing: Sequence[Column]) -> str:
    return (
        f"stream {stream}: destination table {target} has no column(s) {_described(missing)}, "
        f"and spec.schema_evolution is fail: add them, set schema_evolution to add_columns, "
        f"or select or rename columns in the pipeline spec"
    )


def _described(columns: Sequence[Column]) -> str:
    return ", ".join(f"{c.name} ({c.sql_type or c.type})" for c in columns)


def _verb(mode: WriteMode) -> str:
    return {
        WriteMode.APPEND: "append to",
        WriteMode.OVERWRITE: "overwrite",
        WriteMode.UPSERT: "upsert into",
        WriteMode.MERGE: "merge into",
    }[mode]


Note = Callable[[str, str], Awaitable[None]]


async def prepare(
    destination: object,
    landing: Landing,
    mode: WriteMode,
    evolution: SchemaEvolution,
) -> SchemaChanges | None:
    """Checks the destination for the load of `landing`: refuses it
    (PermanentError, every reason), or answers the schema changes its write
    makes in its own transaction (none: an empty SchemaChanges). Nothing is
    changed here. None for a destination without tables to inspect."""
    if not capabilities_of(destination).inspectable:
        return None
    shape = await cast(InspectableDestination, destination).inspect_table(
        landing.table, landing.schema
    )
    found = assess(landing, shape, mode, evolution)
    if found.incompatibilities:
        raise PermanentError("; ".join(found.incompatibilities))
    return SchemaChanges(shape.target, shape.missing_schema, found.added)


def said(changes: SchemaChanges | None) -> list[str]:
    """What the timeline says of schema changes a load committed."""
    if not changes:
        return []
    words = [f"Created schema {changes.schema} in the destination"] if changes.schema else []
    if changes.columns:
        words.append(
            f"Added column(s) {_described(changes.columns)} to {changes.target} "
            f"(schema_evolution: add_columns)"
        )
    return words


@dataclass(frozen=True)
class Inspected:
    """A dry run's view of one stream at the destination."""

    actions: tuple[str, ...]
    incompatibilities: tuple[str, ...]
    # Per output column, the existing destination column's type ("" if new).
    destination_types: dict[str, str] = field(default_factory=dict)


async def inspect(
    destination: object, landing: Landing, mode: WriteMode, evolution: SchemaEvolution
) -> Inspected:
    """What a dry run reports for `landing`: nothing is written."""
    if not capabilities_of(destination).inspectable:
        return Inspected((f"{_verb(mode)} {landing.table} (a file: written whole)",), ())
    shape = await cast(InspectableDestination, destination).inspect_table(
        landing.table, landing.schema
    )
    found = assess(landing, shape, mode, evolution)
    types = {c.name: c.type for c in shape.columns or ()}
    return Inspected(found.actions, found.incompatibilities, types)
