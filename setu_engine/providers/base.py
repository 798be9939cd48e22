"""What a provider is: config validation, and a connector that can test,
discover, preview, read in batches and write a stream atomically.

A provider sees its config with secret references already resolved by the
runtime that executes it (`engine.secrets`); `validate_config` sees the
unresolved config, as the server stores it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from setu_engine.values.types import Batch, Column, Stream

if TYPE_CHECKING:
    from setu_engine.operators.chain import Plan
    from setu_engine.staged.markers import LoadMarker


class WriteMode(StrEnum):
    APPEND = "append"
    OVERWRITE = "overwrite"
    UPSERT = "upsert"
    MERGE = "merge"

    @property
    def needs_key(self) -> bool:
        return self in (WriteMode.UPSERT, WriteMode.MERGE)


class ConfigError(ValueError):
    """The connection's config is wrong; the message says which field and why.
    Another attempt cannot fix it."""

    retryable = False


class ProviderError(Exception):
    """The provider failed (unreachable, refused, bad data); the message is
    the provider's own, fit to show the user.

    `retryable` is how the runtime reports a task that fails with it. A
    provider classifies its driver's errors where it raises them
    (providers/failures.py, docs/errors.md): PermanentError or
    TransientError. One it cannot place stays a plain ProviderError and is
    retried, as a transient one is."""

    plain_message = True
    retryable = True


class PermanentError(ProviderError):
    """Another attempt cannot fix it (credentials refused, an object missing,
    a constraint violated, a spec or type that does not fit, a bad value):
    the task fails at once, and the message names the fix.

    `fields` names the config fields a person should check (the credentials
    refused): the runtime, which knows which of them are secret references,
    names those secrets, never their values."""

    retryable = False

    def __init__(self, message: str, *, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = fields


class TransientError(ProviderError):
    """Another attempt may well succeed (connection refused or reset, a
    timeout, a serialization failure or deadlock, S3 throttling or 5xx):
    the task is retried with backoff."""

    retryable = True


class OutageError(TransientError):
    """The database went away for a moment (connection refused or reset, the
    server shutting down or starting up): not the work's fault, so the task
    is handed back for a retry without spending an attempt, as long as the
    server grants free retries (SETU_OUTAGE_FREE_RETRIES)."""

    outage = True


class ConnectionClosed(ProviderError):
    """A call met its connection closed under it: this runtime closed it,
    as a cancelled or stopping task unwinds. Neither the data's fault nor
    the spec's, so it names no fix; a run that was not cancelled retries."""


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


class Connector(Protocol):
    """An open connection to one provider's system."""

    async def test(self) -> str:
        """A short description of what was reached; raises ProviderError."""
        ...

    async def discover(self) -> list[Stream]: ...

    async def preview(self, stream: Stream, limit: int) -> Batch: ...

    def read(self, stream: Stream, batch_rows: int) -> AsyncIterator[Batch]:
        """The stream's rows in batches of at most batch_rows."""
        ...

    async def write(
        self,
        stream: str,
        columns: Sequence[Column],
        batches: AsyncIterator[Batch],
        mode: WriteMode,
        key: Sequence[str],
        *,
        schema: str | None = None,
        marker: LoadMarker | None = None,
        changes: SchemaChanges | None = None,
    ) -> int:
        """Writes every batch to the named stream under the write mode, all or
        nothing: on any failure the destination keeps its previous content,
        its shape included (the `changes`, a destination with tables makes
        in the write's own transaction). Returns the rows written.

        With a `marker` (setu_engine/staged/markers.py) the write is done once: it is
        recorded with the rows, atomically, and a write that finds it
        recorded writes nothing and returns the rows it recorded.

        `stream` is one identifier (a table, a file name), dots and quotes
        included, in the connection's configured schema or folder; `schema`
        is one the pipeline's author named in spec.destination (a provider
        without schemas lands `schema.stream` as one name)."""
        ...

    async def close(self) -> None: ...


class Egress(Protocol):
    """Vets the host a connection is about to open a socket to
    (setu_engine/support/egress.py); None where the runtime's own network is the limit."""

    async def address(self, host: str, port: int, field: str) -> str:
        """The address to connect to for `host`: resolved and allowed.
        Raises ConfigError (naming `field`) for a denied address, and
        ProviderError when the name does not resolve."""
        ...


class Provider(Protocol):
    name: str

    def validate_config(self, config: dict[str, Any]) -> None:
        """Raises ConfigError naming the field at fault. Secret references
        ({"$secret": NAME}) are allowed where a value is a credential."""
        ...

    async def connect(
        self, config: dict[str, Any], egress: Egress | None = None, *, root: Path | None = None
    ) -> Connector:
        """Opens a connector on the resolved config, to addresses `egress`
        allows, on local files that resolve inside `root` (the cloud's
        workspace folder; None where the runtime's own file system is the
        limit); raises ProviderError. Never falls back to the process's
        environment or files for what the config leaves out."""
        ...


@dataclass(frozen=True)
class CopyBatch:
    """Rows as one complete PostgreSQL binary COPY stream (engine.pgcopy)."""

    data: bytes
    rows: int
    # Where the source's read stood after these rows, for a read that can
    # resume there (ResumableSource); "" otherwise.
    position: str = ""


@dataclass(frozen=True)
class RowChanges:
    """What a write's rows did to the destination: rows new to it, rows whose
    values changed, and rows already there with the same values (which an
    upsert or merge leaves untouched: no new row version, no WAL)."""

    inserted: int
    updated: int = 0
    unchanged: int = 0


class Written(int):
    """The rows a write took (the int every caller reads), with the changes
    they made when the provider can tell: a write that returns a plain int
    (a file, a load found already done) reports no changes."""

    changes: RowChanges

    def __new__(cls, rows: int, changes: RowChanges) -> Written:
        written = super().__new__(cls, rows)
        written.changes = changes
        return written


def changes_of(written: int) -> RowChanges | None:
    return written.changes if isinstance(written, Written) else None


@runtime_checkable
class ResumableSource(Protocol):
    """A source whose read of a stream can resume after a position it gave
    with an earlier batch (SQLite: the rowid), so a retried extract reads
    only the rows after the parts it had stored (setu_engine/movement/transfer.py).
    A resumed read sees the source as it is then (a new snapshot)."""

    async def resumes(self, stream: Stream) -> bool:
        """Whether this stream's read gives positions to resume after."""
        ...


@runtime_checkable
class ResumableRows(ResumableSource, Protocol):
    """A resumable source that reads Python rows (SQLite)."""

    def read_after(
        self, stream: Stream, batch_rows: int, after: str | None
    ) -> AsyncIterator[tuple[Batch, str]]:
        """The stream's rows after `after` (all when None), in batches of at
        most batch_rows, each with the position after its last row."""
        ...


@runtime_checkable
class ResumableCopies(ResumableSource, Protocol):
    """A resumable source that gives binary COPY batches (PostgreSQL: ctid
    ranges), each CopyBatch with its position."""

    def copy_batches_after(
        self, stream: Stream, batch_rows: int, after: str | None
    ) -> AsyncIterator[CopyBatch]: ...


@runtime_checkable
class CountsRows(Protocol):
    """A source that counts the rows it read from its system (every read,
    since it was opened): what a resumed extract saves is measured by it."""

    rows_read: int


@runtime_checkable
class CopySource(Protocol):
    """A source that produces binary COPY batches itself (PostgreSQL), so
    no row becomes a Python object on the way."""

    def copy_batches(self, stream: Stream, batch_rows: int) -> AsyncIterator[CopyBatch]: ...


@runtime_checkable
class CopyDestination(Protocol):
    """A destination that loads binary COPY batches itself and runs the
    operator chain in its own engine (PostgreSQL: compiled to SQL)."""

    async def write_copy(
        self,
        stream: str,
        columns: Sequence[Column],
        parts: AsyncIterator[CopyBatch],
        plan: Plan,
        mode: WriteMode,
        key: Sequence[str],
        *,
        schema: str | None = None,
        marker: LoadMarker | None = None,
        changes: SchemaChanges | None = None,
    ) -> int:
        """Loads every part (rows shaped as `columns`), applies the plan and
        writes under the mode, atomically, naming the target and honouring
        `marker` and `changes` as `write` does. Returns the rows written."""
        ...


def find_stream(streams: Sequence[Stream], wanted: str) -> Stream:
    """A stream by `name` or `namespace.name`; raises ProviderError."""
    for stream in streams:
        if wanted in (stream.name, f"{stream.namespace}.{stream.name}"):
            return stream
    known = ", ".join(qualified(s) for s in streams) or "none"
    raise PermanentError(f"stream {wanted!r} not found (the connection offers: {known})")


def qualified(stream: Stream) -> str:
    return f"{stream.namespace}.{stream.name}" if stream.namespace else stream.name
