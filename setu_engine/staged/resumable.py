"""Resumable loads: a large staged stream loads part by part and still
lands in one transaction (docs/flows.md, "Resumable loads").

A stream with more than one staged part, and at least `min_bytes` of them,
goes through a staging table of its own in the destination
(`_setu_stage_<hash of run and stream>`, next to the target):

1. Each part is copied into the staging table in a transaction of its own,
   together with its load marker (setu_engine/staged/markers.py, part `part-00007`).
   A part whose marker is there was copied by an earlier attempt: a retry
   after a crash starts at the first part without one.
2. One transaction then applies the staging table to the target (append,
   overwrite, upsert or merge, as a one-transaction load would; the
   target's schema changes, `Target.changes`, made first), writes
   the stream's own marker, drops the staging table and prunes the
   markers nothing reads any more (markers.KEEP_MARKERS). Readers of the target
   see nothing of the stream before this commit, and all of it after.
   Just before that commit the reporter hears of the stream once more
   (`Committing.committing`, else `loaded(stream, 0)`): a cancel
   requested by then rolls the apply
   back; one that comes after the COMMIT was sent is too late, and the
   load has happened.

A stream whose marker is there was applied already: nothing is copied.

The staging table is registered by a marker of its own (part `stage`,
written with the table, deleted with it), which records its run, stream
and creation time. It goes:
- with the apply that empties it;
- when its load is cancelled or fails for good (best effort, by whoever
  ran the load): a retry never comes, so nothing would read it again;
- when a later load of another run into the same destination (any staged
  load, resumable or not: setu_engine/movement/transfer.py) finds it idle for
  longer than `ResumePolicy.stale_after` (its process died for good):
  dropped with its part markers, in one transaction, so a run that did
  come back after all would copy every part again, never trust a marker
  of a part that is gone.

A chain with a blocking operator (operators/chain.py BLOCKING_OPS) loads in one
transaction, as a small stream does, so a retry starts from its first part:
its output exists only once the whole stream went through it, so no part
of the input stands for a piece of the output that could be kept.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, runtime_checkable

from setu_engine.errors import ValueFault
from setu_engine.kinds import CopyBatch, WriteMode, Written
from setu_engine.operators.chain import Chain, Plan
from setu_engine.planning.destination_plan import SchemaChanges
from setu_engine.staged import pgcopy, staging
from setu_engine.staged.blob import BlobStore
from setu_engine.staged.markers import LoadIdentity, LoadMarker
from setu_engine.support import testpoints
from setu_engine.support.closing import closing
from setu_engine.values.types import Batch, Column

# Staged bytes (compressed) from which a stream of several parts loads part
# by part: below it, a retry that starts over costs little.
DEFAULT_MIN_BYTES = 64 * 1024 * 1024

STAGE_PREFIX = "_setu_stage_"
# The marker that registers a staging table (see above).
STAGE_PART = "stage"
# How long another run's staging table may sit idle (no part copied) before
# a load into the same destination drops it: far longer than any retry
# backoff or lease, so only a run whose process died for good loses it.
STALE_AFTER = timedelta(hours=24)

log = logging.getLogger("setu.engine")


@dataclass(frozen=True)
class ResumePolicy:
    """Which staged streams load part by part, and when another run's
    staging table counts as abandoned."""

    min_bytes: int = DEFAULT_MIN_BYTES
    stale_after: timedelta = STALE_AFTER

    def applies(self, staged: staging.StagedStream, chain: Chain) -> bool:
        return self.applies_to(staged.parts, chain)

    def applies_to(self, parts: Sequence[staging.Part], chain: Chain) -> bool:
        """On the parts staged so far, too: once true, more parts keep it so
        (a load beside its extract steps aside then: setu_engine/movement/transfer.py)."""
        size = sum(part.size for part in parts)
        return len(parts) > 1 and size >= self.min_bytes and not chain.blocking


DEFAULT_POLICY = ResumePolicy()


def stage_table(run_id: str, stream: str) -> str:
    """The staging table's name: the same for every attempt of a run's
    stream, distinct across runs and streams, and a short identifier."""
    digest = hashlib.sha256(f"{run_id}\0{stream}".encode()).hexdigest()[:20]
    return STAGE_PREFIX + digest


def part_marker(identity: LoadIdentity, stream: str, index: int) -> LoadMarker:
    return identity.marker(stream, f"part-{index:05d}")


def stage_marker(run_id: str, stream: str) -> LoadMarker:
    """The marker that registers the run's staging table for the stream."""
    return LoadMarker(run_id, stream, STAGE_PART)


@dataclass(frozen=True)
class Target:
    """Where a resumable load lands, and how."""

    table: str
    schema: str | None
    plan: Plan
    mode: WriteMode
    key: tuple[str, ...]
    # What the apply changes in the target's shape, in its own transaction.
    changes: SchemaChanges | None = None


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
        self, stage: str, columns: Sequence[Column], schema: str | None, marker: LoadMarker
    ) -> None:
        """Creates the staging table if missing, registered by `marker`
        (stage_marker) in the same transaction."""
        ...

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
        self,
        stage: str,
        columns: Sequence[Column],
        target: Target,
        marker: LoadMarker,
        before_commit: Callable[[], Awaitable[None]],
    ) -> Written | int:
        """Applies the staging table to the target with the stream's marker
        (making `target.changes` first), drops it and prunes the markers
        (markers.KEEP_MARKERS), in one transaction; awaits `before_commit`
        last inside it (raising there rolls it back)."""
        ...

    async def drop_stage(self, stage: str, marker: LoadMarker) -> None:
        """Drops the staging table (wherever it is) with every marker of its
        run and stream but the whole-stream one, in one transaction."""
        ...

    async def stale_stages(self, run_id: str, idle: timedelta) -> list[LoadMarker]:
        """The stage markers of other runs than `run_id` whose run and
        stream had no marker written for longer than `idle`."""
        ...


class LoadProgress(Protocol):
    """Hears of every part a resumable load commits (a transfer's Progress
    is one)."""

    async def loaded(self, stream: str, rows: int) -> None: ...


@runtime_checkable
class Committing(Protocol):
    """A reporter with a last word before an apply commits: it raises to
    roll the apply back (a cancel). Without it, `loaded(stream, 0)` is."""

    async def committing(self, stream: str) -> None: ...


Note = Callable[[str, str], Awaitable[None]]


async def load_stream(
    destination: StagingDestination,
    staged: staging.StagedStream,
    blob: BlobStore,
    prefix: str,
    target: Target,
    reporter: LoadProgress,
    note: Note | None,
    identity: LoadIdentity,
) -> Written | int:
    """Loads one staged stream part by part, then applies it at once. A
    load cancelled or failed for good drops its staging table."""
    name = staged.name
    final = identity.marker(name)
    recorded = await destination.marked(final)
    if recorded is not None:
        return recorded  # applied by an earlier attempt
    stage = stage_table(identity.run_id, name)
    try:
        written = await _load(destination, staged, blob, prefix, target, reporter, note, identity)
    except Exception as exc:
        if _for_good(exc):
            await _drop_quietly(destination, stage, stage_marker(identity.run_id, name))
        raise
    await testpoints.reached(testpoints.APPLIED)
    return written


async def drop_stale_stages(
    destination: StagingDestination, run_id: str, idle: timedelta, note: Note | None
) -> list[str]:
    """Drops the staging tables other runs left idle for longer than
    `idle` (their process died for good); the names dropped."""
    dropped: list[str] = []
    for marker in await destination.stale_stages(run_id, idle):
        stage = stage_table(marker.run_id, marker.stream)
        await destination.drop_stage(stage, marker)
        dropped.append(stage)
        if note is not None:
            await note(
                marker.stream,
                f"Dropped staging table {stage} of run {marker.run_id}, idle for over {idle}",
            )
    return dropped


def _for_good(exc: BaseException) -> bool:
    """A cancel, or a failure no retry can fix: no attempt will read the
    staging table again. (A lost lease or a stop is neither: the run goes
    on elsewhere, and its staging table with it.)"""
    return bool(getattr(exc, "cancels", False)) or getattr(exc, "retryable", True) is False


async def _drop_quietly(destination: StagingDestination, stage: str, marker: LoadMarker) -> None:
    # Best effort: the failure being reported matters more; a table left
    # behind goes with a later load's clean-up.
    try:
        await destination.drop_stage(stage, marker)
    except Exception:
        log.warning("could not drop staging table %s", stage, exc_info=True)


async def _load(
    destination: StagingDestination,
    staged: staging.StagedStream,
    blob: BlobStore,
    prefix: str,
    target: Target,
    reporter: LoadProgress,
    note: Note | None,
    identity: LoadIdentity,
) -> Written | int:
    name = staged.name
    final = identity.marker(name)
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
    await destination.prepare_stage(
        stage, columns, target.schema, stage_marker(identity.run_id, name)
    )
    remaining = staging.StagedStream(staged.stream, [part for _, part in pending])
    parts = staging.read_parts(blob, prefix, remaining)
    async with closing(_paired(pending, parts)) as paired:
        async for (index, _), batch in paired:
            piece: CopyBatch | Batch = batch
            if not destination.copies:
                before = sum(p.rows for p in staged.parts[:index])
                piece = _rows(batch, staged.stream.columns, target.plan, before)
            await destination.stage_part(
                stage, columns, piece, part_marker(identity, name, index), target.schema
            )
            await testpoints.reached(testpoints.STAGED_PART.format(index=index))
            await reporter.loaded(name, batch.rows)

    async def before_commit() -> None:
        await testpoints.reached(testpoints.APPLY_OPEN)
        # The last word of a cancel: after this, the COMMIT is sent.
        if isinstance(reporter, Committing):
            await reporter.committing(name)
        else:
            await reporter.loaded(name, 0)

    return await destination.apply_stage(stage, columns, target, final, before_commit)


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
    async with closing(parts):
        async for batch in parts:
            yield pending[position], batch
            position += 1


def _rows(part: CopyBatch, columns: Sequence[Column], plan: Plan, before: int) -> Batch:
    try:
        rows = pgcopy.decode(columns, part.data)
    except ValueFault as fault:
        raise fault.located(None, before) from fault
    return rows if plan.identity else plan.apply(rows)
