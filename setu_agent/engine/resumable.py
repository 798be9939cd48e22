"""Resumable loads: a large staged stream loads part by part and still
lands in one transaction (docs/flows.md, "Resumable loads").

A stream with more than one staged part, and at least `min_bytes` of them,
goes through a staging table of its own in the destination
(`_setu_stage_<hash of run and stream>`, next to the target):

1. Each part is copied into the staging table in a transaction of its own,
   together with its load marker (engine/markers.py, part `part-00007`).
   A part whose marker is there was copied by an earlier attempt: a retry
   after a crash starts at the first part without one.
2. One transaction then applies the staging table to the target (append,
   overwrite, upsert or merge, as a one-transaction load would), writes
   the stream's own marker and drops the staging table. Readers of the
   target see nothing of the stream before this commit, and all of it
   after.

A stream whose marker is there was applied already: nothing is copied.

A chain with a blocking operator (operators.BLOCKING_OPS) loads in one
transaction, as a small stream does, so a retry starts from its first part:
its output exists only once the whole stream went through it, so no part
of the input stands for a piece of the output that could be kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from setu_agent.engine import pgcopy, staging
from setu_agent.engine.blob import BlobStore
from setu_agent.engine.markers import LoadIdentity, LoadMarker
from setu_agent.engine.operators import Chain, Plan
from setu_agent.engine.providers.base import CopyBatch, WriteMode, Written
from setu_agent.engine.types import Batch, Column
from setu_agent.engine.values import ValueFault

# Staged bytes (compressed) from which a stream of several parts loads part
# by part: below it, a retry that starts over costs little.
DEFAULT_MIN_BYTES = 64 * 1024 * 1024

STAGE_PREFIX = "_setu_stage_"


@dataclass(frozen=True)
class ResumePolicy:
    """Which staged streams load part by part."""

    min_bytes: int = DEFAULT_MIN_BYTES

    def applies(self, staged: staging.StagedStream, chain: Chain) -> bool:
        size = sum(part.size for part in staged.parts)
        return len(staged.parts) > 1 and size >= self.min_bytes and not chain.blocking


DEFAULT_POLICY = ResumePolicy()


def stage_table(run_id: str, stream: str) -> str:
    """The staging table's name: the same for every attempt of a run's
    stream, distinct across runs and streams, and a short identifier."""
    digest = hashlib.sha256(f"{run_id}\0{stream}".encode()).hexdigest()[:20]
    return STAGE_PREFIX + digest


def part_marker(identity: LoadIdentity, stream: str, index: int) -> LoadMarker:
    return identity.marker(stream, f"part-{index:05d}")


@dataclass(frozen=True)
class Target:
    """Where a resumable load lands, and how."""

    table: str
    schema: str | None
    plan: Plan
    mode: WriteMode
    key: tuple[str, ...]


@runtime_checkable
class StagingDestination(Protocol):
    """A destination that loads through a staging table. `copies` says
    whether it stages the staged bytes as they are (COPY; the chain then
    runs in the apply) or rows with the chain applied already."""

    copies: bool

    async def marked(self, marker: LoadMarker) -> int | None:
        """The rows the marker recorded, or None when it is not there."""
        ...

    async def prepare_stage(
        self, stage: str, columns: Sequence[Column], schema: str | None
    ) -> None: ...

    async def stage_part(
        self,
        stage: str,
        columns: Sequence[Column],
        part: CopyBatch | Batch,
        marker: LoadMarker,
        schema: str | None,
    ) -> bool:
        """Copies one part with its marker; False when the marker was there."""
        ...

    async def apply_stage(
        self, stage: str, columns: Sequence[Column], target: Target, marker: LoadMarker
    ) -> Written | int:
        """Applies the staging table to the target with the stream's marker,
        and drops it, in one transaction."""
        ...


class Reporter(Protocol):
    async def loaded(self, stream: str, rows: int) -> None: ...


Note = Callable[[str, str], Awaitable[None]]


async def load_stream(
    destination: StagingDestination,
    staged: staging.StagedStream,
    blob: BlobStore,
    prefix: str,
    target: Target,
    reporter: Reporter,
    note: Note | None,
    identity: LoadIdentity,
) -> Written | int:
    """Loads one staged stream part by part, then applies it at once."""
    name = staged.name
    final = identity.marker(name)
    recorded = await destination.marked(final)
    if recorded is not None:
        return recorded  # applied by an earlier attempt
    stage = stage_table(identity.run_id, name)
    pending: list[tuple[int, staging.Part]] = []
    for index, part in enumerate(staged.parts):
        if await destination.marked(part_marker(identity, name, index)) is None:
            pending.append((index, part))
    done = len(staged.parts) - len(pending)
    remaining_rows = sum(part.rows for _, part in pending)
    if note is not None:
        await note(name, _opening(stage, len(staged.parts), done, pending))
    if done:
        await reporter.loaded(name, staged.rows - remaining_rows)
    # The staging table holds the staged columns when the destination runs
    # the chain itself, else the chain's output.
    columns = staged.stream.columns if destination.copies else target.plan.output
    await destination.prepare_stage(stage, columns, target.schema)
    remaining = staging.StagedStream(staged.stream, [part for _, part in pending])
    parts = staging.read_parts(blob, prefix, remaining)
    async for (index, _), batch in _paired(pending, parts):
        piece: CopyBatch | Batch = batch
        if not destination.copies:
            before = sum(p.rows for p in staged.parts[:index])
            piece = _rows(batch, staged.stream.columns, target.plan, before)
        await destination.stage_part(
            stage, columns, piece, part_marker(identity, name, index), target.schema
        )
        await reporter.loaded(name, batch.rows)
    return await destination.apply_stage(stage, columns, target, final)


def _opening(stage: str, parts: int, done: int, pending: list[tuple[int, staging.Part]]) -> str:
    if not done:
        return f"Loading {parts} parts through staging table {stage}"
    if not pending:
        return f"All {parts} parts are in staging table {stage} already: applying it"
    first = pending[0][0] + 1
    return (
        f"Resuming at part {first} of {parts}: {done} part(s) were copied into "
        f"staging table {stage} by an earlier attempt"
    )


async def _paired(
    pending: list[tuple[int, staging.Part]], parts: AsyncIterator[CopyBatch]
) -> AsyncIterator[tuple[tuple[int, staging.Part], CopyBatch]]:
    position = 0
    async for batch in parts:
        yield pending[position], batch
        position += 1


def _rows(part: CopyBatch, columns: Sequence[Column], plan: Plan, before: int) -> Batch:
    try:
        rows = pgcopy.decode(columns, part.data)
    except ValueFault as fault:
        raise fault.located(None, before) from fault
    return rows if plan.identity else plan.apply(rows)
