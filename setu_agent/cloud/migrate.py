"""The `migrate` task: the cloud's part of a run (docs/flows.md).

cloud → cloud: extract to the blob store, persist `phase = load`, load; or,
for a fresh run whose delta is small, go direct (no blob). A retry resumes
where the last attempt stopped: at `load` it reads the manifest and never
touches the source again, and streams already loaded are skipped.
cloud → agent: stage, then hand the load to the destination's agent.
agent → cloud: the agent staged; this task starts at `load`.

A direct run skips staging because for a small delta re-reading the source
on a retry costs less than writing and reading every row twice; a large
one stages so that a failed load never repeats the extract.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from setu_agent.cloud.book import RunBook, RunOutput
from setu_agent.cloud.connections import ConnectionCache
from setu_agent.handlers import ConnectPolicy, open_connector
from setu_agent.runtime import TaskContext
from setu_agent.runtime.task import NonRetryable, TaskCancelled
from setu_client.errors import FailedPrecondition, LeaseLost
from setu_engine.capabilities import capabilities_of
from setu_engine.errors import ConfigError, SpecError
from setu_engine.kinds import DEFAULT_BATCH_ROWS
from setu_engine.movement import dry_run, transfer
from setu_engine.movement.transfer import read_said
from setu_engine.operators.chain import parse_spec
from setu_engine.planning import incremental
from setu_engine.planning.plans import PlannedStream, incompatibilities
from setu_engine.providers.base import Connector, CountsRows
from setu_engine.staged.blob import BlobSettings, BlobStore
from setu_engine.staged.markers import LoadIdentity
from setu_engine.staged.resumable import DEFAULT_POLICY, ResumePolicy
from setu_engine.staged.staging import Manifest, StoredPart, read_manifest
from setu_engine.support.egress import Egress
from setu_engine.support.secrets import SecretStore
from setu_tasks.results import (
    Artifact,
    MigrateMode,
    MigrateResult,
    StreamCounts,
    changes_said,
)
from setu_tasks.specs import HANDED_LOAD_PAYLOAD, ConnectionSpec, LeasedTask, MigrateSpec

# Runs whose source holds at most this many rows (the providers' estimate)
# go direct when fresh. A named setting: SETU_DIRECT_MAX_ROWS.
DIRECT_MAX_ROWS = 50_000


@dataclass(frozen=True)
class MigrateSettings:
    batch_rows: int = DEFAULT_BATCH_ROWS
    direct_max_rows: int = DIRECT_MAX_ROWS
    # Which staged streams load part by part (setu_engine/staged/resumable.py).
    resume: ResumePolicy = DEFAULT_POLICY
    # cloud → cloud: load the last stream while it is extracted (setu_engine/movement/transfer.py).
    overlap: bool = True
    # What a dry run reads of each stream to check its values (SETU_DRY_RUN_SAMPLE_ROWS).
    sample: dry_run.SampleLimits = dry_run.DEFAULT_SAMPLE


BookOf = Callable[[LeasedTask], RunBook]
BlobOf = Callable[[BlobSettings], AbstractAsyncContextManager[BlobStore]]


class RunReporter:
    """Hears every batch: writes the run's counts (which WatchJob shows and
    which answer whether to cancel) and feeds the heartbeat's progress."""

    def __init__(self, book: RunBook, run: MigrateSpec, ctx: TaskContext) -> None:
        self._book = book
        self._ctx = ctx
        self.rows_extracted = run.rows_extracted if run.phase == "load" else 0
        self.rows_loaded = 0
        # Each stream's [extracted, loaded] in this task, for the run's page.
        self._streams: dict[str, list[int]] = {}
        # A direct copy reports each batch once, when it is loaded.
        self.loads_too = False
        # Until the extract is staged whole: a load beside it (overlapped)
        # leaves the run at the extract, for the checkpoint.
        self.extracting = run.phase != "load"
        # Parts stored since the last progress report: the next one records
        # them in the run's books (transfer.Booking).
        self._unsent: list[StoredPart] = []
        # The source's own count of rows read (CountsRows), from where this
        # attempt began.
        self._source: CountsRows | None = None
        self._read_before = 0

    def reads_from(self, source: Connector) -> None:
        """Counts what this attempt reads of `source`, where it counts."""
        if capabilities_of(source).counts_rows:
            counted = cast(CountsRows, source)
            self._source, self._read_before = counted, counted.rows_read

    @property
    def source_rows_read(self) -> int | None:
        """Rows this attempt read from the source, by the source's count."""
        return None if self._source is None else self._source.rows_read - self._read_before

    def stored(self, part: StoredPart) -> None:
        self._unsent.append(part)

    async def extracted(self, stream: str, rows: int) -> None:
        self.rows_extracted += rows
        self._streams.setdefault(stream, [0, 0])[0] += rows
        self._checkpoint(stream)
        if self.loads_too:
            self._ctx.report(rows_read=self.rows_extracted, stream=stream)
            self._ctx.check_cancelled()
            return
        await self._flush(stream)

    async def loaded(self, stream: str, rows: int) -> None:
        self.rows_loaded += rows
        self._streams.setdefault(stream, [0, 0])[1] += rows
        self._checkpoint(stream)
        await self._flush(stream)

    def _checkpoint(self, stream: str) -> None:
        """Where the run stands, should the task be handed back."""
        if self.loads_too:
            where = f"direct copy of {stream}, {self.rows_extracted:,} rows read"
        elif self.extracting:
            where = f"extract of {stream}, {self.rows_extracted:,} rows read"
            if self.rows_loaded:
                where += f" ({self.rows_loaded:,} loaded beside it)"
            if self.source_rows_read is not None:
                where += f"; {read_said(self.source_rows_read)}"
        else:
            where = f"load of {stream}, {self.rows_loaded:,} rows written"
        self._ctx.checkpoint = where

    async def note(self, stream: str, message: str) -> None:
        await self._book.event(message, stream=stream)

    async def _flush(self, stream: str) -> None:
        self._ctx.report(
            rows_read=self.rows_extracted, rows_written=self.rows_loaded, stream=stream
        )
        unsent, self._unsent = self._unsent, []
        try:
            cancel = await self._book.progress(
                self.rows_extracted,
                self.rows_loaded,
                unsent,
                {name: (e, w) for name, (e, w) in self._streams.items()},
            )
        except BaseException:
            self._unsent[:0] = unsent  # the next report records them
            raise
        if cancel or self._ctx.cancel_requested.is_set():
            raise TaskCancelled("cancelled by request")


class Migrate:
    def __init__(
        self,
        books: BookOf,
        blobs: BlobOf,
        secrets: SecretStore,
        settings: MigrateSettings,
        policy: ConnectPolicy | None = None,
        connections: ConnectionCache | None = None,
    ) -> None:
        self._connections = connections
        self._books = books
        self._blobs = blobs
        self._secrets = secrets
        self._settings = settings
        self._policy = policy

    async def __call__(self, ctx: TaskContext) -> MigrateResult:
        book = self._books(ctx.task)
        try:
            run = await book.spec()
        except LeaseLost:
            raise
        except FailedPrecondition as exc:  # e.g. the run's pipeline was deleted
            raise NonRetryable(str(exc)) from exc
        if run.ended:
            # Cancelled (or failed) while the task waited: never revive it.
            return MigrateResult(MigrateMode.SKIPPED, reason="the run had already ended")
        if run.cancel_requested:
            raise TaskCancelled("cancelled by request")
        try:
            async with self._blobs(run.blob) as blob:
                return await _Run(self, ctx, book, run, blob).run()
        except LeaseLost:
            raise
        # FailedPrecondition: the run ended, or one of its connections is gone.
        except (ConfigError, SpecError, LookupError, FailedPrecondition) as exc:
            raise NonRetryable(str(exc)) from exc

    async def connect(
        self, ctx: TaskContext, run: MigrateSpec, connection: ConnectionSpec
    ) -> Connector:
        """A connector on one end of the run; from the worker's connection
        cache when it has one (setu_agent/cloud/connections.py). Hand it to
        `release` when done."""
        store = self._secrets.for_workspace(run.workspace_id)
        policy: ConnectPolicy | None = (
            self._policy.for_workspace(run.workspace_id) if self._policy else None
        )
        cache = self._connections
        if cache is None:
            return await open_connector(ctx, connection.provider, connection.config, store, policy)

        async def cached(
            provider: str, config: dict[str, Any], egress: Egress | None, root: Path | None
        ) -> Connector:
            return await cache.take(
                run.workspace_id, connection.connection_id, provider, config, egress, root
            )

        return await open_connector(
            ctx, connection.provider, connection.config, store, policy, cached
        )

    async def release(self, connector: Connector) -> None:
        """Back to the connection cache, or closed when there is none."""
        if self._connections is None:
            await connector.close()
        else:
            await self._connections.give_back(connector)


class _Run:
    """One attempt at one run."""

    def __init__(
        self, migrate: Migrate, ctx: TaskContext, book: RunBook, run: MigrateSpec, blob: BlobStore
    ) -> None:
        self._migrate = migrate
        self._settings = migrate._settings
        self._ctx = ctx
        self._book = book
        self._run = run
        self._blob = blob
        self._spec = parse_spec(run.spec)
        self._reporter = RunReporter(book, run, ctx)
        # The run's outputs as the last stream's record answered them.
        self._outputs: list[RunOutput] | None = None

    async def run(self) -> MigrateResult:
        run, book = self._run, self._book
        handed = self._ctx.task.payload.get(dry_run.PLAN_PAYLOAD)
        if run.dry_run and handed is not None:
            # agent → cloud: the source's agent planned; the destination is ours.
            return await self._inspect(dry_run.handed_plan(handed))
        if run.dry_run and run.phase == "load":
            # A dry run never writes a destination, whatever staged before.
            raise NonRetryable("a dry run does not load: it ended at its plan")
        if run.phase == "load":
            handed = self._ctx.task.payload.get(HANDED_LOAD_PAYLOAD) is True
            if not handed or self._ctx.task.attempt > 1:
                # Said on a real resume only: an agent's extract handed on
                # to this load is its first step (the plan's line says so).
                await book.event("Resuming at load: the staged data is read again")
            manifest = await read_manifest(self._blob, run.blob_prefix)
        else:
            source = await self._migrate.connect(self._ctx, run, run.source)
            self._reporter.reads_from(source)
            try:
                offered = await source.discover()
                chosen = transfer.select_streams(offered, run.streams)
                deltas = await incremental.windows(
                    source, chosen, run.spec, run.cursors, run.write_mode
                )
                streams = [d.stream for d in deltas]
                # An incremental stream's delta is counted with its cursor
                # predicate; a full one is the provider's estimate.
                total = sum(d.stream.row_estimate if d.rows is None else d.rows for d in deltas)
                exact = all(d.rows is not None for d in deltas)
                if run.dry_run:
                    await book.plan(rows_total=total, extract=True)
                    return await self._dry_run(source, streams)
                await self._say_windows(streams)
                # 0 means the provider cannot tell (a file): stage, to be safe.
                fresh = run.phase is None and not run.load_on_agent
                if fresh and (total > 0 or exact) and total <= self._settings.direct_max_rows:
                    return await self._direct(source, streams, total)
                await book.plan(
                    rows_total=total,
                    extract=True,
                    phase="extract",
                    message=f"Extracting {len(streams)} stream(s), about {total} rows, "
                    f"in the cloud to the blob store",
                )
                if self._settings.overlap and not run.load_on_agent:
                    overlapped = await self._overlapped(source, streams)
                    if overlapped is not None:
                        return overlapped
                manifest = await transfer.stage(
                    source,
                    streams,
                    self._blob,
                    run.blob_prefix,
                    self._reporter,
                    self._settings.batch_rows,
                    earlier=run.stored_parts,
                )
            finally:
                await self._migrate.release(source)
            await self._staged(manifest)
        if run.load_on_agent:
            # cloud → agent: the cloud's part ends here; the run goes on at the edge.
            return MigrateResult(MigrateMode.HANDOFF, rows_extracted=manifest.rows)
        return await self._load(manifest)

    async def _overlapped(self, source: Connector, streams: list[Any]) -> MigrateResult | None:
        """Stage and load at once (transfer.stage_and_load); None when the
        destination cannot, and the run stages first as usual."""
        run, book = self._run, self._book
        destination = await self._migrate.connect(self._ctx, run, run.destination)
        try:
            if not transfer.overlaps(destination):
                return None
            await book.plan(load=True, message="Loading in the cloud as the parts are staged")
            manifest, totals = await transfer.stage_and_load(
                source,
                destination,
                streams,
                self._blob,
                run.blob_prefix,
                self._spec,
                run.write_mode,
                self._reporter,
                identity=LoadIdentity(run.job_id),
                staged=self._staged,
                batch_rows=self._settings.batch_rows,
                resume=self._settings.resume,
                earlier=self._run.stored_parts,
            )
            # The overlapped stream loads first; it is the last only when alone.
            alone = len(manifest.streams) == len(totals)
            for total in totals:
                await self._record(total, last=alone and total is totals[-1])
        finally:
            await self._migrate.release(destination)
        return await self._load(manifest, frozenset(t.stream for t in totals))

    async def _staged(self, manifest: Manifest) -> None:
        self._reporter.extracting = False
        await self._book.staged(Artifact.of(self._run.blob_prefix, manifest))
        read = self._reporter.source_rows_read
        if read is not None:
            await self._book.event(f"Extract staged: {read_said(read)}")

    async def _load(
        self, manifest: Manifest, loaded: frozenset[str] = frozenset()
    ) -> MigrateResult:
        run, book = self._run, self._book
        if loaded and all(s.name in loaded for s in manifest.streams):
            return await self._finish(MigrateMode.STAGED)
        done = {o.stream for o in await book.outputs() if o.loaded} | loaded
        await book.plan(
            rows_total=manifest.rows, load=True, message="Loading staged data in the cloud"
        )
        destination = await self._migrate.connect(self._ctx, run, run.destination)
        try:
            for staged in manifest.streams:
                if staged.name in loaded:
                    continue
                if staged.name in done:
                    await book.event("Already loaded", stream=staged.name)
                    continue
                totals = await transfer.load(
                    destination,
                    Manifest([staged]),
                    self._blob,
                    run.blob_prefix,
                    self._spec,
                    run.write_mode,
                    self._reporter,
                    identity=LoadIdentity(run.job_id),
                    resume=self._settings.resume,
                )
                for total in totals:
                    last = staged is manifest.streams[-1] and total is totals[-1]
                    await self._record(total, last=last)
        finally:
            await self._migrate.release(destination)
        return await self._finish(MigrateMode.STAGED)

    async def _direct(self, source: Connector, streams: list[Any], total: int) -> MigrateResult:
        run, book = self._run, self._book
        await book.plan(
            rows_total=total,
            extract=True,
            load=True,
            phase="direct",
            message=f"Copying directly in the cloud (about {total} rows, no staging)",
        )
        # Each batch is read and loaded in one step: its `loaded` report
        # carries both counts and the cancel check.
        self._reporter.loads_too = True
        destination = await self._migrate.connect(self._ctx, run, run.destination)
        try:
            for stream in streams:
                totals = await transfer.direct(
                    source,
                    destination,
                    [stream],
                    self._spec,
                    run.write_mode,
                    self._reporter,
                    self._settings.batch_rows,
                    identity=LoadIdentity(run.job_id),
                )
                for done in totals:
                    await self._record(done, last=stream is streams[-1] and done is totals[-1])
        finally:
            await self._migrate.release(destination)
        return await self._finish(MigrateMode.DIRECT)

    async def _dry_run(self, source: Connector, streams: list[Any]) -> MigrateResult:
        planned = dry_run.plan(self._spec, streams, self._run.write_mode)
        # The source is open here, and only here: its sample is checked now.
        checks = await dry_run.sample(
            source, self._spec, streams, self._run.write_mode, self._settings.sample
        )
        planned = dry_run.with_samples(planned, checks)
        if self._run.load_on_agent:
            # cloud → agent: the destination's secrets live with its agent and
            # must never be resolved here: the agent inspects it next.
            await self._book.event(
                f"Dry run: planned {len(planned)} stream(s) from the source; the destination "
                f"is on an agent, which inspects it next"
            )
            return MigrateResult(MigrateMode.DRY_RUN, planned=planned)
        return await self._inspect(planned)

    async def _inspect(self, planned: tuple[PlannedStream, ...]) -> MigrateResult:
        """The plan completed where the load would run: the destination
        tested and compared with each stream; nothing written."""
        destination = await self._migrate.connect(self._ctx, self._run, self._run.destination)
        try:
            await destination.test()
            planned = await dry_run.inspect_destination(
                destination, planned, self._run.write_mode, self._spec.schema_evolution
            )
        finally:
            await self._migrate.release(destination)
        # The test's own message quotes the connection (host, database, user),
        # which may be resolved secrets: the event says only that it passed.
        found = len(incompatibilities(planned))
        await self._book.event(
            f"Dry run: planned {len(planned)} stream(s); the destination passed its test "
            f"and was inspected ({found} incompatibilit{'y' if found == 1 else 'ies'})"
        )
        return MigrateResult(MigrateMode.DRY_RUN, planned=planned)

    async def _say_windows(self, streams: list[Any]) -> None:
        for stream in streams:
            note = incremental.window_note(stream)
            if note is not None:
                await self._book.event(note[1], stream=note[0])

    async def _record(self, totals: transfer.StreamTotals, *, last: bool = False) -> None:
        """A stream's load in the books; the `last` of the migrate also
        writes the run's counts and keeps its outputs for `_finish`."""
        outputs = await self._book.stream_loaded(
            totals.stream,
            totals.extracted,
            totals.loaded,
            totals.checksum or "",
            totals.changes,
            totals.cursor,
            message=f"Loaded {totals.loaded} of {totals.extracted} rows"
            f"{changes_said(totals.changes)}",
            record_progress=last,
        )
        if last:
            self._outputs = outputs

    async def _finish(self, how: MigrateMode) -> MigrateResult:
        outputs = self._outputs
        if not outputs:  # the last stream was loaded before: ask
            outputs = await self._book.outputs(record_progress=True)
        extracted = sum(o.rows_extracted for o in outputs)
        loaded = sum(o.rows_loaded for o in outputs)
        return MigrateResult(
            how,
            rows_extracted=extracted,
            rows_loaded=loaded,
            streams=tuple(StreamCounts(o.stream, o.rows_extracted, o.rows_loaded) for o in outputs),
        )
