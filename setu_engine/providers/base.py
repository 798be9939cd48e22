"""What a provider is: config validation, and a connector that can test,
discover, preview, read in batches and write a stream atomically.

A provider sees its config with secret references already resolved by the
runtime that executes it (support/secrets.py); `validate_config` sees the
unresolved config, as the server stores it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from setu_engine.capabilities import Capabilities
from setu_engine.kinds import CopyBatch, WriteMode
from setu_engine.values.types import Batch, Column, Stream

if TYPE_CHECKING:
    from setu_engine.planning.destination_plan import SchemaChanges
    from setu_engine.staged.markers import LoadMarker
    from setu_engine.support.egress import Egress


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


class Provider(Protocol):
    name: str
    # What its connectors can do beyond Connector (docs/providers.md).
    capabilities: Capabilities

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


class CompiledChain(Protocol):
    """What a COPY destination needs of the operator chain bound to a
    stream's columns (the engine's Plan, setu_engine/operators/chain.py):
    the columns it outputs, whether it leaves every row as it is, and the
    SELECT that computes it in SQL from a relation holding the input."""

    @property
    def output(self) -> tuple[Column, ...]: ...

    @property
    def identity(self) -> bool: ...

    def select_sql(self, relation: str, extra: str = "") -> str: ...


@runtime_checkable
class CopyDestination(Protocol):
    """A destination that loads binary COPY batches itself and runs the
    operator chain in its own engine (PostgreSQL: compiled to SQL)."""

    async def write_copy(
        self,
        stream: str,
        columns: Sequence[Column],
        parts: AsyncIterator[CopyBatch],
        plan: CompiledChain,
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
