"""Moving streams: stage (source → blob), load (blob → destination) and
direct (source → destination in one pass). Each picks the fastest path
the two ends allow:

- A CopySource gives binary COPY batches; anything else is read as Python
  rows and encoded (staged/pgcopy.py).
- A CopyDestination loads COPY batches and runs the operator chain itself;
  anything else gets decoded rows with the chain applied in Python.

The runtime's Progress hears of every batch, and may raise TaskCancelled
there: a batch is the grain of progress and of cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeGuard, TypeVar, cast, runtime_checkable

from setu_engine.capabilities import capabilities_of
from setu_engine.errors import ConfigError, PermanentError, ValueFault
from setu_engine.kinds import (
    DEFAULT_BATCH_ROWS,
    CopyBatch,
    RowChanges,
    WriteMode,
    Written,
    changes_of,
)
from setu_engine.operators.chain import Chain, PipelineSpec, Plan
from setu_engine.planning import destination_plan
from setu_engine.planning.destination_plan import SchemaChanges
from setu_engine.providers.base import (
    Connector,
    CopyDestination,
    CopySource,
    ResumableCopies,
    ResumableRows,
    ResumableSource,
)
from setu_engine.staged import pgcopy, resumable, staging
from setu_engine.staged.blob import BlobStore
from setu_engine.staged.markers import LoadIdentity, LoadMarker
from setu_engine.support.closing import closing
from setu_engine.values.types import Batch, Column, Stream, qualified
from setu_engine.values.window import OBJECTS, CursorMark

T = TypeVar("T")


def read_said(rows: int) -> str:
    """How a timeline says what one attempt read from its source, by the
    source's own count (CountsRows); tests sum these over a run."""
    return f"source rows read in this attempt: {rows:,}"


class Progress(Protocol):
    """Hears of every batch a move extracts and loads (the runtime's progress
    report; it may raise TaskCancelled)."""

    async def extracted(self, stream: str, rows: int) -> None: ...

    async def loaded(self, stream: str, rows: int) -> None: ...


@runtime_checkable
class Noting(Protocol):
    """A reporter that also tells the job's timeline what a load changed in
    the destination (a schema created, columns added)."""

    async def note(self, stream: str, message: str) -> None: ...


@runtime_checkable
class Booking(Protocol):
    """A reporter that records each part in the run's books once it is
    stored whole, so a retry or a hand-back resumes after it."""

    def stored(self, part: staging.StoredPart) -> None: ...


@runtime_checkable
class JsonLinesSource(Protocol):
    """A source that renders its rows as JSON Lines itself (PostgreSQL)."""

    def json_lines(self, stream: Stream, batch_rows: int) -> AsyncIterator[CopyBatch]: ...


@runtime_checkable
class JsonLinesDestination(Protocol):
    """A destination that writes rows that come as JSON Lines already."""

    def takes_json_lines(self, mode: WriteMode) -> bool: ...

    async def write_json_lines(
        self,
        stream: str,
        columns: Sequence[Column],
        parts: AsyncIterator[CopyBatch],
        mode: WriteMode,
        *,
        schema: str | None = None,
        marker: LoadMarker | None = None,
        changes: SchemaChanges | None = None,
        key: Sequence[str] = (),
    ) -> int: ...


@runtime_checkable
class CsvSource(Protocol):
    """A source that renders its rows as CSV itself (PostgreSQL), in the
    hand-off dialect both ends of the CSV path hold to: RFC 4180 (comma,
    double quotes, a newline after each record), no header, the stream's
    columns in order; NULL an unquoted empty field and an empty text `""`;
    per neutral type: boolean `t`/`f`; integers in decimal; real and double
    in shortest exact digits, `NaN`, `Infinity`, `-Infinity`, `-0`; numeric
    in its exact digits (no exponent), `NaN`, `Infinity`, `-Infinity`; bytes
    in hex digits; date `YYYY-MM-DD`, time `HH:MM:SS[.ffffff]`, timestamp
    `YYYY-MM-DD HH:MM:SS[.ffffff]`, timestamptz the same, in UTC (no offset),
    each date or timestamp's ±infinity `infinity` / `-infinity` and a year
    outside 1-9999 in any other spelling (which a reader refuses, as the rows
    path does); uuid, json and text as their text. Each batch holds whole
    records and says how many."""

    def csv_batches(self, stream: Stream, batch_rows: int) -> AsyncIterator[CopyBatch]: ...


@runtime_checkable
class CsvDestination(Protocol):
    """A destination that parses that CSV into columnar batches itself."""

    def takes_csv(self, columns: Sequence[Column]) -> bool: ...

    async def write_csv(
        self,
        stream: str,
        columns: Sequence[Column],
        parts: AsyncIterator[CopyBatch],
        mode: WriteMode,
        key: Sequence[str],
        *,
        schema: str | None = None,
        marker: LoadMarker | None = None,
        changes: SchemaChanges | None = None,
    ) -> Written | int: ...


@dataclass(frozen=True)
class StreamTotals:
    stream: str
    extracted: int
    loaded: int
    checksum: str = ""
    # What the load did to the destination, where the provider tells.
    changes: RowChanges | None = None
    # An incremental stream's highest cursor value loaded (setu_engine/planning/incremental.py).
    cursor: CursorMark | None = None


def select_streams(available: Sequence[Stream], wanted: Sequence[str]) -> list[Stream]:
    """The pipeline's streams (all when none are named), in the order named."""
    if not wanted:
        return list(available)
    chosen: list[Stream] = []
    for name in wanted:
        match = [s for s in available if name in (s.name, qualified(s))]
        if not match:
            raise PermanentError(_not_offered(name, available))
        chosen.append(match[0])
    return chosen


def _not_offered(name: str, available: Sequence[Stream]) -> str:
    """Why a named stream is not there: the close names first, then all."""
    names = sorted({n for s in available for n in (s.name, qualified(s))})
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    offered = ", ".join(qualified(s) for s in available) or "none"
    return f"stream {name!r} not found in the source ({hint}it offers: {offered})"


@dataclass(frozen=True)
class StreamPlan:
    """How one stream lands: its operator plan, the table (or file) it
    writes, its key, and a schema only where the pipeline names one.

    `table` is one identifier, whatever it holds: a source's stream named
    `public.victim` (or `a"."b`) lands as that one name in the destination
    connection's configured schema (or folder), so no source can steer a
    write into another schema. Only the pipeline's author can, with
    spec.destination: `{stream: "schema.table"}` (split at the first dot)."""

    plan: Plan
    table: str
    key: tuple[str, ...]
    schema: str | None = None
    # What the write changes in the destination's shape, in its own
    # transaction (set by _prepare, just before the write).
    changes: SchemaChanges | None = None

    @property
    def destination(self) -> str:
        """Where it lands, for people to read."""
        return f"{self.schema}.{self.table}" if self.schema else self.table

    def landing(self, stream: str) -> destination_plan.Landing:
        return destination_plan.Landing(
            stream, self.table, self.schema, tuple(self.plan.output), self.key
        )


def landing_name(spec: PipelineSpec, stream: Stream) -> tuple[str | None, str]:
    """(schema or None, table) for a stream: its own name as one identifier,
    unless spec.destination maps it, where `schema.table` names a schema."""
    mapped = spec.mapped_destination(stream.name, stream.namespace)
    if mapped is None:
        return None, stream.name
    schema, dot, table = mapped.partition(".")
    return (schema, table) if dot and schema and table else (None, mapped)


def plan_stream(spec: PipelineSpec, stream: Stream, mode: WriteMode) -> StreamPlan:
    since = stream.since
    # A file stream's window has no cursor column to order a dedupe by.
    cursor = since.cursor if since is not None and since.cursor_type != OBJECTS else None
    plan = spec.chain_for(stream.name, stream.namespace).plan(stream.columns, cursor)
    key = spec.primary_key_for(stream.name, stream.namespace)
    if key is None:
        output = {c.name for c in plan.output}
        key = stream.primary_key if set(stream.primary_key) <= output else ()
    if mode.needs_key and not key:
        raise ConfigError(
            f"write mode {mode.value} needs a key for stream {qualified(stream)}: the source "
            f"has no primary key among the output columns; set spec.primary_key.{stream.name}"
        )
    unknown = [k for k in key if k not in {c.name for c in plan.output}]
    if unknown:
        has = ", ".join(c.name for c in plan.output)
        raise ConfigError(
            f"spec.primary_key.{stream.name}: unknown column(s) {', '.join(unknown)} "
            f"(stream {qualified(stream)} has: {has})"
        )
    schema, table = landing_name(spec, stream)
    return StreamPlan(plan, table, tuple(key), schema)


async def stage(
    source: Connector,
    streams: Sequence[Stream],
    blob: BlobStore,
    prefix: str,
    reporter: Progress,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    *,
    earlier: Sequence[staging.StoredPart] = (),
) -> staging.Manifest:
    """Extracts every stream into parts under prefix and writes the manifest
    last, so a manifest always describes complete data. `earlier`: the
    parts an earlier attempt stored, as the run's books hold them; a stream
    whose read can resume keeps the ones found in blob as recorded and reads
    the source only after them (_stage_stream)."""
    staged = [
        await _stage_stream(
            source, blob, prefix, index, stream, reporter, batch_rows, earlier=earlier
        )
        for index, stream in enumerate(streams)
    ]
    manifest = staging.Manifest(staged)
    await staging.write_manifest(blob, prefix, manifest)
    return manifest


StagedHook = Callable[[staging.Manifest], Awaitable[None]]

# How long a failed extract lets the load beside it roll back by itself.
STOP_GRACE_SECONDS = 10.0


def overlaps(destination: Connector) -> bool:
    """Whether a load can run beside its extract (stage_and_load): only a
    destination whose write is one transaction that commits after its last
    part, so an extract that fails midway leaves it unchanged."""
    return capabilities_of(destination).copy_in


class ExtractFailed(Exception):
    """Ends a load that ran beside its extract when the extract failed: the
    load's transaction rolls back, and the extract's own error is raised."""


class StepAside(Exception):
    """Ends a load beside its extract once the stream proves large (see
    stage_and_load): the load rolls back, having committed nothing."""


class _Feed:
    """Parts handed from an extract to the load beside it, in order, each
    once it is stored whole. The extract never waits for the load: the
    first few parts wait in memory, and a load that falls further behind
    reads the rest back from the blob store. The end comes only after the
    manifest is stored and the run's phase is load, so the load commits
    nothing a manifest does not describe; a failed extract ends the feed
    with ExtractFailed instead, and a stream that proves `large` (on the
    parts staged so far) with StepAside, at once: later parts are not fed."""

    HELD = 2  # parts kept in memory for the load; beyond, it reads them back

    def __init__(
        self, blob: BlobStore, prefix: str, large: Callable[[Sequence[staging.Part]], bool]
    ) -> None:
        self._blob = blob
        self._prefix = prefix
        self._queue: asyncio.Queue[tuple[staging.Part, CopyBatch | None] | Exception | None]
        self._queue = asyncio.Queue()
        self._held = 0
        self._large = large
        self._staged: list[staging.Part] = []
        self.stepped_aside = False
        self.reported = 0  # rows the load reported loaded (rolled back if it steps aside)

    def put(self, part: staging.Part, batch: CopyBatch | None) -> None:
        """A part stored whole: with its bytes, or None for one an earlier
        attempt stored (read back from the blob store)."""
        if self.stepped_aside:
            return
        self._staged.append(part)
        if self._large(self._staged):
            self.stepped_aside = True
            self.end(StepAside("the stream loads part by part after its extract"))
            return
        keep = batch is not None and self._held < self.HELD
        self._held += keep
        self._queue.put_nowait((part, batch if keep else None))

    def end(self, error: Exception | None = None) -> None:
        self._queue.put_nowait(error)

    async def parts(self) -> AsyncIterator[CopyBatch]:
        while (item := await self._queue.get()) is not None:
            if isinstance(item, Exception):
                raise item
            if self.stepped_aside:
                continue  # parts queued before it: they would only be rolled back
            part, batch = item
            if batch is None:
                batch = await staging.read_part(self._blob, self._prefix, part)
            else:
                self._held -= 1
            yield batch


async def stage_and_load(
    source: Connector,
    destination: Connector,
    streams: Sequence[Stream],
    blob: BlobStore,
    prefix: str,
    spec: PipelineSpec,
    mode: WriteMode,
    reporter: Progress,
    *,
    identity: LoadIdentity,
    staged: StagedHook,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    resume: resumable.ResumePolicy = resumable.DEFAULT_POLICY,
    earlier: Sequence[staging.StoredPart] = (),
) -> tuple[staging.Manifest, list[StreamTotals]]:
    """`stage`, with the last stream loaded while it is extracted: both ends
    of a cloud → cloud run in one worker (docs/flows.md, "Overlapped stages").

    Each part reaches the load once its upload is complete, from memory (the
    bytes the part was made of) while the load keeps up. The load's one
    transaction commits only after the manifest is stored and `staged` has
    recorded it (the run's phase is load from then on), so what it commits
    is always what the manifest describes: a crash before that commits
    nothing, and a retry re-extracts or resumes at load as it would after
    `stage`. A failed extract rolls the load back; a failed load does not
    stop the extract (a retry then resumes at load), and its error is raised
    once the extract is staged. The other streams load afterwards, from the
    blob store (`load`); the caller skips the ones returned here.

    A stream that proves large while it is extracted (its parts so far are
    ones `load` would load part by part, by `resume`) is not loaded here:
    a crash of one transaction would start it over, where `load` resumes
    at its first part without a marker. The load beside it steps aside
    (rolls back, having committed nothing), the extract goes on alone, the
    timeline says so, and the stream is not returned: `load` loads it."""
    if not streams:
        manifest = await stage(source, streams, blob, prefix, reporter, batch_rows)
        await staged(manifest)
        return manifest, []
    *before, last = streams
    written = [
        await _stage_stream(source, blob, prefix, i, s, reporter, batch_rows, earlier=earlier)
        for i, s in enumerate(before)
    ]
    name = qualified(last)
    landing = plan_stream(spec, last, mode)  # a spec it cannot take fails before any work
    chain = spec.chain_for(last.name, last.namespace)
    feed = _Feed(blob, prefix, lambda parts: _part_by_part(destination, parts, chain, resume))
    loading = asyncio.create_task(
        _load_beside(destination, last, landing, feed, spec, mode, reporter, identity)
    )
    try:
        index = len(before)
        written.append(
            await _stage_stream(
                source, blob, prefix, index, last, reporter, batch_rows, feed.put, earlier=earlier
            )
        )
        manifest = staging.Manifest(written)
        await staging.write_manifest(blob, prefix, manifest)
        await staged(manifest)
    except BaseException as exc:
        feed.end(ExtractFailed(f"the extract of {name} failed: {exc}"))
        await _ended(loading)
        raise
    if feed.stepped_aside:
        await _stepped_aside(loading, feed, name, reporter, resume)
        return manifest, []
    feed.end()
    loaded = await loading
    last_staged = manifest.streams[-1]
    totals = StreamTotals(
        name, last_staged.rows, loaded, last_staged.checksum, changes_of(loaded), last_staged.cursor
    )
    return manifest, [totals]


async def _load_beside(
    destination: Connector,
    stream: Stream,
    landing: StreamPlan,
    feed: _Feed,
    spec: PipelineSpec,
    mode: WriteMode,
    reporter: Progress,
    identity: LoadIdentity,
) -> int:
    name = qualified(stream)
    # Here, not before the extract: a destination that waits (a lock) or
    # refuses must not hold up the extract, which a retry resumes after.
    landing = await _prepare(destination, name, landing, mode, spec)

    async def counted() -> AsyncIterator[CopyBatch]:
        async with closing(feed.parts()) as parts:
            async for part in parts:
                yield part
                feed.reported += part.rows
                await reporter.loaded(name, part.rows)

    with _naming(name):
        written = await _write(
            destination, stream.columns, counted(), landing, mode, identity.marker(name)
        )
    await _said(landing, name, reporter)
    return written


async def _stepped_aside(
    loading: asyncio.Task[int],
    feed: _Feed,
    name: str,
    reporter: Progress,
    resume: resumable.ResumePolicy,
) -> None:
    """Once the load beside a large stream rolled back (its outcome does not
    matter: `load` loads the stream again), takes back the rows it reported
    and says why the stream loads after its extract."""
    await _ended(loading)
    if feed.reported:
        await reporter.loaded(name, -feed.reported)
    if isinstance(reporter, Noting):
        await reporter.note(
            name,
            f"{name}: large stream (≥ {_size(resume.min_bytes)} staged): loads part by part "
            "after the extract, so a crash resumes",
        )


def _size(count: int) -> str:
    return f"{count / 2**20:g} MiB" if count >= 2**20 else f"{count} bytes"


async def _ended(task: asyncio.Task[int]) -> None:
    """Waits for a load the extract ended (its own error says less than the
    extract's, which the caller raises). A load copying a part sees the end
    when it asks for the next; one that waits in its database (a lock) for
    longer than STOP_GRACE_SECONDS is cancelled there."""
    await asyncio.wait({task}, timeout=STOP_GRACE_SECONDS)
    task.cancel()
    with contextlib.suppress(BaseException):
        await task


async def _stage_stream(
    source: Connector,
    blob: BlobStore,
    prefix: str,
    index: int,
    stream: Stream,
    reporter: Progress,
    batch_rows: int,
    on_part: Callable[[staging.Part, CopyBatch | None], None] | None = None,
    *,
    earlier: Sequence[staging.StoredPart] = (),
) -> staging.StagedStream:
    name = qualified(stream)
    positioned = capabilities_of(source).resumable_reads and await cast(
        ResumableSource, source
    ).resumes(stream)
    kept: list[staging.StoredPart] = []
    if positioned:
        kept = await _resumed(blob, prefix, index, name, earlier, reporter)
    after = kept[-1].position if kept else None

    async def counted(rows: int) -> None:
        await reporter.extracted(name, rows)

    numbers = itertools.count(len(kept))

    def stored(part: staging.Part, batch: CopyBatch | None) -> None:
        # Parts are stored one at a time, in order (staging.write_stream).
        if isinstance(reporter, Booking) and batch is not None:
            number = next(numbers)
            reporter.stored(staging.StoredPart(index, name, number, part, batch.position))
        if on_part is not None:
            on_part(part, batch)

    for resumed in kept:
        stored(resumed.part, None)
    if kept:
        await reporter.extracted(name, sum(p.part.rows for p in kept))
    batches = _copy_batches(source, stream, batch_rows, after if positioned else None, positioned)
    with _naming(name):
        written = await staging.write_stream(
            blob, prefix, index, stream, batches, counted, stored, [p.part for p in kept]
        )
    written.cursor = stream.since.mark if stream.since else None
    return written


async def _resumed(
    blob: BlobStore,
    prefix: str,
    index: int,
    name: str,
    earlier: Sequence[staging.StoredPart],
    reporter: Progress,
) -> list[staging.StoredPart]:
    """The parts of this stream an earlier attempt stored that the extract
    can build on: numbered from 0 without a gap, each with a position, and
    found in blob with the recorded size and SHA-256; from the first that is
    not, the stream is read again (the timeline says why)."""
    mine = sorted(
        (p for p in earlier if p.stream_index == index and p.stream == name), key=lambda p: p.number
    )
    kept: list[staging.StoredPart] = []
    for stored in mine:
        if stored.number != len(kept) or not stored.position:
            break
        fault = await staging.verify_part(blob, prefix, stored.part)
        if fault is not None:
            if isinstance(reporter, Noting):
                await reporter.note(
                    name,
                    f"{name}: part {stored.number} is not as recorded ({fault}): "
                    "the extract reads the source again from there",
                )
            break
        kept.append(stored)
    if kept and isinstance(reporter, Noting):
        rows = sum(p.part.rows for p in kept)
        await reporter.note(
            name,
            f"{name}: resuming the extract at part {len(kept)}: parts 0 to {len(kept) - 1} "
            f"({rows:,} rows) stored by an earlier attempt, verified in blob; the source "
            "is read only after them",
        )
    return kept


async def load(
    destination: Connector,
    manifest: staging.Manifest,
    blob: BlobStore,
    prefix: str,
    spec: PipelineSpec,
    mode: WriteMode,
    reporter: Progress,
    *,
    identity: LoadIdentity,
    resume: resumable.ResumePolicy = resumable.DEFAULT_POLICY,
) -> list[StreamTotals]:
    """Loads every staged stream, each atomically and once: a stream the
    destination's markers show loaded for this run is not written again.
    A large one loads part by part, resumably (setu_engine/staged/resumable.py)."""
    plans = [plan_stream(spec, s.stream, mode) for s in manifest.streams]
    totals: list[StreamTotals] = []
    if capabilities_of(destination).staged_loads:
        # However this run loads, staging tables other runs abandoned go.
        note = reporter.note if isinstance(reporter, Noting) else None
        stages = cast(resumable.StagingDestination, destination)
        await resumable.drop_stale_stages(stages, identity.run_id, resume.stale_after, note)
    for staged, landing in zip(manifest.streams, plans, strict=True):
        marker = identity.marker(staged.name)
        landing = await _prepare(destination, staged.name, landing, mode, spec)
        with _naming(staged.name):
            if _resumable(destination, staged, spec, resume):
                written = await _load_resumably(
                    destination, staged, blob, prefix, landing, mode, reporter, identity
                )
            else:
                parts = staging.read_parts(blob, prefix, staged)
                written = await _write(
                    destination,
                    staged.stream.columns,
                    _counted_parts(parts, staged.name, reporter),
                    landing,
                    mode,
                    marker,
                )
        await _said(landing, staged.name, reporter)
        changes = changes_of(written)
        totals.append(
            StreamTotals(staged.name, staged.rows, written, staged.checksum, changes, staged.cursor)
        )
    return totals


def _resumable(
    destination: Connector,
    staged: staging.StagedStream,
    spec: PipelineSpec,
    resume: resumable.ResumePolicy,
) -> TypeGuard[resumable.StagingDestination]:
    chain = spec.chain_for(staged.stream.name, staged.stream.namespace)
    return _part_by_part(destination, staged.parts, chain, resume)


def _part_by_part(
    destination: Connector,
    parts: Sequence[staging.Part],
    chain: Chain,
    resume: resumable.ResumePolicy,
) -> bool:
    """Whether a stream of these parts loads part by part (resumably), on
    the parts staged so far while it is extracted too (stage_and_load)."""
    return capabilities_of(destination).staged_loads and resume.applies_to(parts, chain)


async def _load_resumably(
    destination: resumable.StagingDestination,
    staged: staging.StagedStream,
    blob: BlobStore,
    prefix: str,
    landing: StreamPlan,
    mode: WriteMode,
    reporter: Progress,
    identity: LoadIdentity,
) -> int:
    target = resumable.Target(
        landing.table, landing.schema, landing.plan, mode, landing.key, landing.changes
    )
    note = reporter.note if isinstance(reporter, Noting) else None
    return await resumable.load_stream(
        destination, staged, blob, prefix, target, reporter, note, identity
    )


async def direct(
    source: Connector,
    destination: Connector,
    streams: Sequence[Stream],
    spec: PipelineSpec,
    mode: WriteMode,
    reporter: Progress,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    *,
    identity: LoadIdentity,
) -> list[StreamTotals]:
    """Source → operators → destination in one pass, no blob; each stream
    once per run, as load does."""
    plans = [plan_stream(spec, s, mode) for s in streams]
    totals: list[StreamTotals] = []
    for stream, landing in zip(streams, plans, strict=True):
        landing = await _prepare(destination, qualified(stream), landing, mode, spec)
        with _naming(qualified(stream)):
            done = await _direct_stream(
                source, destination, stream, landing, mode, reporter, batch_rows, identity
            )
        await _said(landing, qualified(stream), reporter)
        mark = stream.since.mark if stream.since else None
        totals.append(dataclasses.replace(done, cursor=mark))
    return totals


async def _prepare(
    destination: Connector,
    stream: str,
    landing: StreamPlan,
    mode: WriteMode,
    spec: PipelineSpec,
) -> StreamPlan:
    """The load refused (setu_engine/planning/destination_plan.py: the checks a dry run
    reports), or `landing` with the schema changes its write makes in its
    own transaction (nothing is changed before the write)."""
    changes = await destination_plan.prepare(
        destination, landing.landing(stream), mode, spec.schema_evolution
    )
    return dataclasses.replace(landing, changes=changes)


async def _said(landing: StreamPlan, stream: str, reporter: Progress) -> None:
    """Once the write committed: the schema changes it made, on the timeline."""
    if isinstance(reporter, Noting):
        for words in destination_plan.said(landing.changes):
            await reporter.note(stream, words)


@contextlib.contextmanager
def _naming(stream: str) -> Iterator[None]:
    """A bad value met anywhere in a stream's transfer names the stream."""
    try:
        yield
    except ValueFault as fault:
        raise fault.located(stream) from fault


async def _direct_stream(
    source: Connector,
    destination: Connector,
    stream: Stream,
    landing: StreamPlan,
    mode: WriteMode,
    reporter: Progress,
    batch_rows: int,
    identity: LoadIdentity,
) -> StreamTotals:
    name = qualified(stream)
    marker = identity.marker(name)
    extracted = 0

    async def copies() -> AsyncIterator[CopyBatch]:
        nonlocal extracted
        async with closing(_copy_batches(source, stream, batch_rows)) as batches:
            async for batch in batches:
                extracted += batch.rows
                await reporter.extracted(name, batch.rows)
                yield batch

    async def rows() -> AsyncIterator[Batch]:
        nonlocal extracted
        async with closing(read_ahead(source.read(stream, batch_rows))) as batches:
            async for batch in batches:
                extracted += len(batch)
                await reporter.extracted(name, len(batch))
                yield batch
                await reporter.loaded(name, len(batch))

    async def lines(source: JsonLinesSource) -> AsyncIterator[CopyBatch]:
        nonlocal extracted
        async with closing(source.json_lines(stream, batch_rows)) as batches:
            async for batch in batches:
                extracted += batch.rows
                await reporter.extracted(name, batch.rows)
                yield batch

    async def csv_lines(source: CsvSource) -> AsyncIterator[CopyBatch]:
        nonlocal extracted
        async with closing(source.csv_batches(stream, batch_rows)) as batches:
            async for batch in batches:
                extracted += batch.rows
                await reporter.extracted(name, batch.rows)
                yield batch

    reads, writes = capabilities_of(source), capabilities_of(destination)
    if writes.copy_in or not reads.copy_out:
        parts = _counted_parts(read_ahead(copies()), name, reporter)
        written = await _write(destination, stream.columns, parts, landing, mode, marker)
    elif (
        reads.json_lines_out
        and writes.json_lines_in
        and cast(JsonLinesDestination, destination).takes_json_lines(mode)
        and landing.plan.identity
    ):
        # The source renders the lines itself (PostgreSQL, in C and in its
        # own process): no value becomes a Python object on the way.
        rendered = lines(cast(JsonLinesSource, source))
        async with closing(_counted_parts(read_ahead(rendered), name, reporter)) as json:
            written = await cast(JsonLinesDestination, destination).write_json_lines(
                landing.table,
                landing.plan.output,
                json,
                mode,
                schema=landing.schema,
                marker=marker,
                changes=landing.changes,
                key=landing.key,  # the stream's key, which a file keeps in its schema
            )
    elif (
        reads.csv_out
        and writes.csv_in
        and cast(CsvDestination, destination).takes_csv(landing.plan.output)
        and landing.plan.identity
    ):
        # The source renders CSV (PostgreSQL, in its own process) and the
        # destination parses it into columns (DuckDB, through Arrow's C++
        # reader): decoding each value into Python and back cost four
        # fifths of a PostgreSQL → DuckDB run.
        rendered = csv_lines(cast(CsvSource, source))
        async with closing(_counted_parts(read_ahead(rendered), name, reporter)) as csv:
            written = await cast(CsvDestination, destination).write_csv(
                landing.table,
                landing.plan.output,
                csv,
                mode,
                landing.key,
                schema=landing.schema,
                marker=marker,
                changes=landing.changes,
            )
    else:
        # Rows for a Python writer: asyncpg decodes them faster than a COPY
        # decoder written in Python could.
        async with closing(_applied(rows(), landing.plan)) as applied:
            written = await destination.write(
                landing.table,
                landing.plan.output,
                applied,
                mode,
                landing.key,
                schema=landing.schema,
                marker=marker,
                changes=landing.changes,
            )
    return StreamTotals(name, extracted, written, changes=changes_of(written))


async def _write(
    destination: Connector,
    columns: Sequence[Column],
    parts: AsyncIterator[CopyBatch],
    landing: StreamPlan,
    mode: WriteMode,
    marker: LoadMarker,
) -> int:
    """Writes `parts`, and closes them however the write ends."""
    async with closing(parts):
        if capabilities_of(destination).copy_in:
            return await cast(CopyDestination, destination).write_copy(
                landing.table,
                columns,
                parts,
                landing.plan,
                mode,
                landing.key,
                schema=landing.schema,
                marker=marker,
                changes=landing.changes,
            )
        async with closing(_applied(_decoded(parts, columns), landing.plan)) as rows:
            return await destination.write(
                landing.table,
                landing.plan.output,
                rows,
                mode,
                landing.key,
                schema=landing.schema,
                marker=marker,
                changes=landing.changes,
            )


async def _copy_batches(
    source: Connector,
    stream: Stream,
    batch_rows: int,
    after: str | None = None,
    positioned: bool = False,
) -> AsyncIterator[CopyBatch]:
    """The stream as COPY batches; a positioned read (ResumableSource) from
    after `after`, each batch with the position after its rows."""
    declared = capabilities_of(source)
    if positioned and declared.resumable_copies:
        resumed = cast(ResumableCopies, source).copy_batches_after(stream, batch_rows, after)
        async with closing(resumed) as copies:
            async for batch in copies:
                yield batch
        return
    if positioned and declared.resumable_rows:
        before = 0
        async with closing(
            cast(ResumableRows, source).read_after(stream, batch_rows, after)
        ) as reads:
            async for rows, position in reads:
                try:
                    data = pgcopy.encode(stream.columns, rows)
                except ValueFault as fault:
                    raise fault.located(None, before) from fault
                before += len(rows)
                yield CopyBatch(data, len(rows), position)
        return
    if declared.copy_out:
        async with closing(cast(CopySource, source).copy_batches(stream, batch_rows)) as copies:
            async for batch in copies:
                yield batch
        return
    before = 0
    async with closing(source.read(stream, batch_rows)) as reads:
        async for rows in reads:
            try:
                data = pgcopy.encode(stream.columns, rows)
            except ValueFault as fault:
                raise fault.located(None, before) from fault
            before += len(rows)
            yield CopyBatch(data, len(rows))


async def _decoded(
    parts: AsyncIterator[CopyBatch], columns: Sequence[Column]
) -> AsyncIterator[Batch]:
    before = 0
    async with closing(parts):
        async for part in parts:
            try:
                rows = pgcopy.decode(columns, part.data)
            except ValueFault as fault:
                raise fault.located(None, before) from fault
            before += len(rows)
            yield rows


async def _applied(batches: AsyncIterator[Batch], plan: Plan) -> AsyncIterator[Batch]:
    # apply_stream: a blocking chain (dedupe, aggregate) sees every batch first.
    async with closing(batches), closing(plan.apply_stream(batches)) as applied:
        async for batch in applied:
            yield batch


async def _counted_parts(
    parts: AsyncIterator[CopyBatch], name: str, reporter: Progress
) -> AsyncIterator[CopyBatch]:
    async with closing(parts):
        async for part in parts:
            yield part
            await reporter.loaded(name, part.rows)


async def read_ahead(items: AsyncIterator[T], depth: int = 1) -> AsyncIterator[T]:
    """Runs the producer one step ahead of the consumer, so a source reads
    its next batch while the destination writes the last one. The producer
    owns `items`: closed when it ends, however (a consumer that stops
    cancels it)."""
    queue: asyncio.Queue[tuple[bool, T | Exception | None]] = asyncio.Queue(depth)

    async def produce() -> None:
        try:
            async with closing(items):
                async for item in items:
                    await queue.put((True, item))
            await queue.put((False, None))
        except Exception as exc:  # handed to the consumer, which raises it
            await queue.put((False, exc))

    producer = asyncio.create_task(produce())
    try:
        while True:
            more, item = await queue.get()
            if not more:
                if isinstance(item, Exception):
                    raise item
                return
            yield item  # type: ignore[misc]
    finally:
        producer.cancel()
        # Its outcome is consumed here (nothing left for the loop to log);
        # a cancel of this consumer while it waits still propagates.
        await asyncio.gather(producer, return_exceptions=True)
