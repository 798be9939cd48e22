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

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from setu_agent.engine import transfer
from setu_agent.engine.blob import BlobStore
from setu_agent.engine.operators import PipelineSpec, SpecError, parse_spec
from setu_agent.engine.providers.base import ConfigError, Connector, WriteMode
from setu_agent.engine.secrets import SecretStore
from setu_agent.engine.staging import Manifest, read_manifest, run_prefix
from setu_agent.handlers import ConnectPolicy, open_connector
from setu_agent.results import MigrateMode, MigrateResult, PlannedStream, StreamCounts
from setu_agent.runtime import TaskContext
from setu_agent.runtime.task import NonRetryable, TaskCancelled
from setu_server.models import CLOUD, Job, Phase
from setu_server.service.runbook import RunBook
from setu_server.service.runs import snapshot_of

# Runs whose source holds at most this many rows (the providers' estimate)
# go direct when fresh. A named setting: SETU_DIRECT_MAX_ROWS.
DIRECT_MAX_ROWS = 50_000


@dataclass(frozen=True)
class MigrateSettings:
    batch_rows: int = transfer.DEFAULT_BATCH_ROWS
    direct_max_rows: int = DIRECT_MAX_ROWS


class RunReporter:
    """Hears every batch: writes the run's counts (which WatchJob shows and
    which answer whether to cancel) and feeds the heartbeat's progress."""

    def __init__(self, book: RunBook, job: Job, ctx: TaskContext) -> None:
        self._book = book
        self._job_id = job.id
        self._ctx = ctx
        self.rows_extracted = job.rows_extracted if job.phase is Phase.LOAD else 0
        self.rows_loaded = 0

    async def extracted(self, stream: str, rows: int) -> None:
        self.rows_extracted += rows
        await self._flush(stream)

    async def loaded(self, stream: str, rows: int) -> None:
        self.rows_loaded += rows
        await self._flush(stream)

    async def _flush(self, stream: str) -> None:
        self._ctx.report(
            rows_read=self.rows_extracted, rows_written=self.rows_loaded, stream=stream
        )
        cancel = await self._book.progress(self._job_id, self.rows_extracted, self.rows_loaded)
        if cancel or self._ctx.cancel_requested.is_set():
            raise TaskCancelled("cancelled by request")


class Migrate:
    def __init__(
        self,
        book: RunBook,
        blob: BlobStore,
        secrets: SecretStore,
        settings: MigrateSettings,
        policy: ConnectPolicy | None = None,
    ) -> None:
        self._book = book
        self._blob = blob
        self._secrets = secrets
        self._settings = settings
        self._policy = policy

    async def __call__(self, ctx: TaskContext) -> MigrateResult:
        job = await self._book.job(UUID(ctx.task.job_id))
        if job is None or job.state.terminal:
            # Cancelled (or failed) while the task waited: never revive it.
            return MigrateResult(MigrateMode.SKIPPED, reason="the run had already ended")
        if job.cancel_requested:
            raise TaskCancelled("cancelled by request")
        try:
            return await self._run(ctx, job)
        except (ConfigError, SpecError, LookupError) as exc:
            raise NonRetryable(str(exc)) from exc

    async def _run(self, ctx: TaskContext, job: Job) -> MigrateResult:
        taken = snapshot_of(job)
        spec = parse_spec(taken.spec)
        mode = taken.write_mode
        reporter = RunReporter(self._book, job, ctx)
        prefix = run_prefix(job.workspace_id, job.pipeline_id, job.id)
        if job.phase is Phase.LOAD:
            await self._book.event(job.id, "Resuming at load: the staged data is read again")
            manifest = await read_manifest(self._blob, prefix)
        else:
            source = await self._connect(ctx, taken.source_connection_id)
            try:
                offered = await source.discover()
                streams = transfer.select_streams(offered, list(taken.streams))
                total = sum(s.row_estimate for s in streams)
                await self._book.plan(job.id, rows_total=total, extract_runtime=CLOUD)
                if job.dry_run:
                    return await self._dry_run(ctx, job, streams, spec, mode)
                # 0 means the provider cannot tell (a file): stage, to be safe.
                direct = taken.placement.load_agent is None
                if direct and job.phase is None and 0 < total <= self._settings.direct_max_rows:
                    return await self._direct(
                        ctx, job, source, streams, spec, mode, reporter, total
                    )
                await self._book.enter_phase(
                    job.id,
                    Phase.EXTRACT,
                    f"Extracting {len(streams)} stream(s), about {total} rows, "
                    f"in the cloud to the blob store",
                )
                manifest = await transfer.stage(
                    source, streams, self._blob, prefix, reporter, self._settings.batch_rows
                )
            finally:
                await source.close()
            await self._book.staged(job.id, UUID(ctx.task.id), prefix, manifest)
        if taken.placement.load_agent is not None:
            # cloud → agent: the cloud's part ends here; the run goes on at the edge.
            return MigrateResult(MigrateMode.HANDOFF, rows_extracted=manifest.rows)
        return await self._load(ctx, job, manifest, prefix, spec, mode, reporter)

    async def _load(
        self,
        ctx: TaskContext,
        job: Job,
        manifest: Manifest,
        prefix: str,
        spec: PipelineSpec,
        mode: WriteMode,
        reporter: RunReporter,
    ) -> MigrateResult:
        done = {o.stream for o in await self._book.outputs(job.id) if o.loaded}
        await self._book.plan(job.id, rows_total=manifest.rows, load_runtime=CLOUD)
        await self._book.event(job.id, "Loading staged data in the cloud")
        destination = await self._connect(ctx, snapshot_of(job).destination_connection_id)
        try:
            for staged in manifest.streams:
                if staged.name in done:
                    await self._book.event(job.id, "Already loaded", stream=staged.name)
                    continue
                totals = await transfer.load(
                    destination, Manifest([staged]), self._blob, prefix, spec, mode, reporter
                )
                for total in totals:
                    await self._record(job, total)
        finally:
            await destination.close()
        return await self._finish(job, MigrateMode.STAGED)

    async def _direct(
        self,
        ctx: TaskContext,
        job: Job,
        source: Connector,
        streams: list[Any],
        spec: PipelineSpec,
        mode: WriteMode,
        reporter: RunReporter,
        total: int,
    ) -> MigrateResult:
        await self._book.enter_phase(
            job.id, Phase.DIRECT, f"Copying directly in the cloud (about {total} rows, no staging)"
        )
        await self._book.plan(job.id, load_runtime=CLOUD)
        destination = await self._connect(ctx, snapshot_of(job).destination_connection_id)
        try:
            for stream in streams:
                totals = await transfer.direct(
                    source, destination, [stream], spec, mode, reporter, self._settings.batch_rows
                )
                for done in totals:
                    await self._record(job, done)
        finally:
            await destination.close()
        return await self._finish(job, MigrateMode.DIRECT)

    async def _dry_run(
        self, ctx: TaskContext, job: Job, streams: list[Any], spec: PipelineSpec, mode: WriteMode
    ) -> MigrateResult:
        planned = []
        for stream in streams:
            landing = transfer.plan_stream(spec, stream, mode)
            planned.append(
                PlannedStream(
                    stream=stream.name,
                    destination=landing.destination,
                    rows_estimate=stream.row_estimate,
                    columns=tuple(landing.plan.output),
                    key=tuple(landing.key),
                )
            )
        destination = await self._connect(ctx, snapshot_of(job).destination_connection_id)
        try:
            await destination.test()
        finally:
            await destination.close()
        # The test's own message quotes the connection (host, database, user),
        # which may be resolved secrets: the event says only that it passed.
        await self._book.event(
            job.id, f"Dry run: planned {len(planned)} stream(s); the destination passed its test"
        )
        return MigrateResult(MigrateMode.DRY_RUN, planned=tuple(planned))

    async def _record(self, job: Job, totals: transfer.StreamTotals) -> None:
        await self._book.stream_loaded(
            job.id, totals.stream, totals.extracted, totals.loaded, totals.checksum or None
        )
        await self._book.event(
            job.id,
            f"Loaded {totals.loaded} of {totals.extracted} rows",
            stream=totals.stream,
        )

    async def _finish(self, job: Job, how: MigrateMode) -> MigrateResult:
        outputs = await self._book.outputs(job.id)
        extracted = sum(o.rows_extracted for o in outputs)
        loaded = sum(o.rows_loaded for o in outputs)
        await self._book.progress(job.id, extracted, loaded)
        return MigrateResult(
            how,
            rows_extracted=extracted,
            rows_loaded=loaded,
            streams=tuple(StreamCounts(o.stream, o.rows_extracted, o.rows_loaded) for o in outputs),
        )

    async def _connect(self, ctx: TaskContext, connection_id: UUID) -> Connector:
        provider, config, workspace_id = await self._book.connection(connection_id)
        store = self._secrets.for_workspace(workspace_id)
        policy = self._policy.for_workspace(workspace_id) if self._policy else None
        return await open_connector(ctx, provider, config, store, policy)
