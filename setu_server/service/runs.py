"""Runs of pipelines: submitting one, and dispatching its first task.

A run snapshots its pipeline into `job.params` (a RunSnapshot) at submit,
so an edit made while it runs (or before a retry) never changes what it
moves. Dispatch
follows placement (service.placement): a run whose first stage sits on an
agent needs that agent online, or it fails at once with how to fix it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any
from uuid import UUID

from setu_client.clock import Clock
from setu_client.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    JobNotFound,
    LeaseLost,
    NotFound,
)
from setu_engine.errors import SpecError
from setu_engine.movement import dry_run
from setu_engine.operators.chain import parse_spec
from setu_engine.staged.blob import BlobSettings
from setu_engine.staged.staging import run_prefix
from setu_server.models import (
    EventLevel,
    Job,
    JobKind,
    JobState,
    PipelineForRun,
    RunSnapshot,
    Task,
    TaskKind,
    TaskState,
    runtime_name,
)
from setu_server.service.agents import AgentPresence
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.placement import placement
from setu_server.store import jobs, pipelines, runs, stream_state, tasks
from setu_server.store.db import Database, Executor, transaction
from setu_tasks.specs import HANDED_LOAD_PAYLOAD, ConnectionSpec, ExtractSpec, LoadSpec

# A paused pipeline's manual run says why it runs anyway (the CLI says it too).
PAUSED_NOTE = "pipeline is paused: schedules make no runs; this manual run goes ahead"

# Attempts of a run's tasks: a retry resumes where the last one stopped.
RUN_TASK_ATTEMPTS = 3


def snapshot(pipeline: PipelineForRun) -> RunSnapshot:
    """What a run of `pipeline` moves, and where its stages run."""
    return RunSnapshot(
        pipeline_name=pipeline.name,
        source_connection_id=pipeline.source.id,
        destination_connection_id=pipeline.destination.id,
        streams=tuple(pipeline.streams),
        spec=pipeline.spec,
        write_mode=pipeline.write_mode,
        placement=placement(pipeline.source, pipeline.destination),
    )


def snapshot_of(job: Job) -> RunSnapshot:
    """The snapshot a run took at submit; FailedPrecondition for any other job."""
    if job.params is None:
        raise FailedPrecondition(f"job {job.id} is not a run of a pipeline")
    return job.params


class RunService:
    def __init__(
        self,
        pool: Database,
        clock: Clock,
        lifecycle: JobLifecycle,
        blob: BlobSettings,
        presence: AgentPresence | None = None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._lifecycle = lifecycle
        self._blob = blob
        self._presence = presence or AgentPresence(pool, clock)

    async def submit(
        self,
        workspace_id: UUID,
        pipeline_id: UUID,
        *,
        start: bool,
        dry_run: bool,
        idempotency_key: str,
        rerun_of: UUID | None = None,
    ) -> Job:
        """A manual run (or, with `rerun_of`, a run that repeats that one,
        which must be a run of this pipeline in this workspace)."""
        if idempotency_key:
            first = await runs.job_by_idempotency_key(self._pool, workspace_id, idempotency_key)
            if first is not None:
                return first
        pipeline = await runs.pipeline_for_run(self._pool, pipeline_id, workspace_id)
        if pipeline is None:
            raise NotFound(f"pipeline {pipeline_id} not found")
        _check_spec(pipeline)
        notes = await self._manual_notes(workspace_id, pipeline_id, rerun_of)
        try:
            async with transaction(self._pool) as conn:
                job = await self._create(
                    conn,
                    pipeline,
                    start=start,
                    dry_run=dry_run,
                    idempotency_key=idempotency_key,
                    notes=notes,
                )
                if start:
                    await self.dispatch(conn, job)
        except AlreadyExists:
            # A concurrent submit with the same key won: answer its job.
            first = await runs.job_by_idempotency_key(self._pool, workspace_id, idempotency_key)
            if first is None:
                raise
            return first
        return await self._reread(job)

    async def _manual_notes(
        self, workspace_id: UUID, pipeline_id: UUID, rerun_of: UUID | None
    ) -> str:
        """What a manual run's first event adds: the run it repeats, and
        that its pipeline is paused (which stops the schedule only)."""
        notes = ""
        if rerun_of is not None:
            # Another workspace's job is not found, as GetJob says of it.
            old = await jobs.get_job(self._pool, rerun_of, workspace_id)
            if old is None:
                raise JobNotFound(f"rerun_of: job {rerun_of} not found")
            if old.kind is not JobKind.RUN:
                raise FailedPrecondition(
                    f"rerun_of: job {rerun_of} is a {old.kind.value} of a connection, not a "
                    "run: there is no run to repeat"
                )
            if old.pipeline_id != pipeline_id:
                raise InvalidArgument(
                    f"rerun_of: job {rerun_of} is a run of another pipeline, not of {pipeline_id}"
                )
            notes += f"; rerun of job {rerun_of}"
        found = await pipelines.get_pipeline(self._pool, pipeline_id, workspace_id)
        if found is not None and found.paused:
            notes += f"; {PAUSED_NOTE}"
        return notes

    def published(self, jobs: list[Job]) -> None:
        """Runs submitted in a caller's transaction (the scheduler's), after
        its commit: the ticks that failed to start are counted (metrics)."""
        self._lifecycle.published(jobs)

    async def submit_scheduled(self, db: Executor, pipeline: PipelineForRun, tick: datetime) -> Job:
        """The run of one schedule tick, through the same path as a manual
        run, in the caller's transaction. A tick that cannot run (invalid
        pipeline, offline agent) is recorded as a failed run, so the history
        shows it."""
        job = await self._create(
            db, pipeline, start=True, dry_run=False, idempotency_key="", scheduled_for=tick
        )
        try:
            _check_spec(pipeline)
            async with db.transaction():
                await self.dispatch(db, job)
        except FailedPrecondition as exc:
            # In the caller's transaction: nobody can be waiting on it yet,
            # and other processes hear the NOTIFY at commit.
            return await self._lifecycle.transition(
                job.id,
                JobState.FAILED,
                f"Scheduled run not started: {exc}",
                db=db,
                level=EventLevel.ERROR,
                error_message=str(exc),
            )
        return job

    async def _create(
        self,
        db: Executor,
        pipeline: PipelineForRun,
        *,
        start: bool,
        dry_run: bool,
        idempotency_key: str,
        scheduled_for: datetime | None = None,
        notes: str = "",
    ) -> Job:
        taken = snapshot(pipeline)
        where = taken.placement
        now = self._clock.sql_now()
        job = await jobs.insert_job(
            db,
            id=uuid.uuid4(),
            workspace_id=pipeline.workspace_id,
            kind=JobKind.RUN,
            state=JobState.PENDING if start else JobState.READY,
            now=now,
            pipeline_id=pipeline.id,
            params=taken.to_json(),
            dry_run=dry_run,
            idempotency_key=idempotency_key or None,
            scheduled_for=scheduled_for,
        )
        how = ", dry run" if dry_run else ", scheduled" if scheduled_for else ""
        await jobs.insert_job_event(
            db, job.id, f"Run of {pipeline.name} submitted ({where.flow}{how}){notes}", now=now
        )
        return job

    async def dispatch(self, db: Executor, job: Job) -> None:
        """The first task of a pending run (also StartJob's dispatcher)."""
        if job.kind is not JobKind.RUN:
            return
        where = snapshot_of(job).placement
        if where.first_agent is not None:
            await self._require_online(db, where.first_agent)
        if where.load_agent not in (None, where.first_agent):
            # Agent A → agent B: B is needed only once A has staged, so the
            # run is accepted, and its timeline says B is away.
            await self._note_if_offline(db, job, where.load_agent, "load")
        if job.dry_run and where.extract_agent is not None:
            await self._dispatch_dry_run(db, job, where.extract_agent)
            return
        # The first task runs on the extract's runtime (migrate: the cloud).
        await self._dispatch(db, job, where.first_task, where.extract_agent)

    async def dispatch_load(self, db: Executor, job: Job) -> int:
        """After the extract staged: on the destination's agent, one `load`
        task per stream, so a retry reloads only the stream that failed (a
        load is atomic per stream, and an append must not land twice); in
        the cloud, one `migrate` that resumes at load and skips loaded streams.
        Returns the tasks dispatched."""
        where = snapshot_of(job).placement
        if where.load_agent is None:
            handed = {HANDED_LOAD_PAYLOAD: True}  # its first step is the load: no resume
            await self._dispatch(db, job, TaskKind.MIGRATE, None, extra=handed)
            return 1
        staged = await jobs.job_outputs(db, job.id)
        for output in staged:
            await self._dispatch(db, job, TaskKind.LOAD, where.load_agent, output.stream)
        return len(staged)

    async def _dispatch_dry_run(self, db: Executor, job: Job, agent_id: UUID) -> None:
        """A dry run whose source is on an agent: that agent discovers (which
        opens, so tests, the source, and stages nothing) and samples each
        stream's first rows through the chain; the plan is made
        when the streams come back (outcomes.PlansDryRun). Nothing loads, and
        the cloud resolves no edge connection's secrets."""
        taken = snapshot_of(job)
        found = await runs.connection_for_runtime(db, taken.source_connection_id)
        if found is None:
            raise FailedPrecondition(f"connection {taken.source_connection_id} no longer exists")
        provider, config, _ = found
        source = ConnectionSpec(str(taken.source_connection_id), provider, config)
        connection = {"connection": source.to_payload(), "workspace_id": str(job.workspace_id)}
        # What the agent samples of the source, there (dry_run.sample).
        connection[dry_run.SAMPLE_PAYLOAD] = dry_run.sample_payload(
            taken.spec, taken.streams, taken.write_mode
        )
        await self._dispatch(db, job, TaskKind.DISCOVER, agent_id, extra=connection)

    async def dispatch_dry_run_plan(
        self, db: Executor, job: Job, planned: list[dict[str, Any]]
    ) -> None:
        """A dry run's plan, made from the source, goes to where the load
        would run, which inspects the destination (service/dry_runs.py):
        the destination's agent as a `load`, or the cloud as a `migrate`."""
        agent = snapshot_of(job).placement.load_agent
        kind = TaskKind.LOAD if agent is not None else TaskKind.MIGRATE
        await self._dispatch(db, job, kind, agent, extra={dry_run.PLAN_PAYLOAD: planned})

    async def _dispatch(
        self,
        db: Executor,
        job: Job,
        kind: TaskKind,
        agent_id: UUID | None,
        stream: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        payload: dict[str, Any] = {"job_id": str(job.id), "pipeline_id": str(job.pipeline_id)}
        payload |= extra or {}
        if stream is not None:
            payload["stream"] = stream
        task = await tasks.insert_task(
            db,
            id=uuid.uuid4(),
            job_id=job.id,
            workspace_id=job.workspace_id,
            kind=kind,
            agent_id=agent_id,
            max_attempts=RUN_TASK_ATTEMPTS,
            payload=payload,
            now=self._clock.sql_now(),
        )
        what = "staged data to load" if kind is TaskKind.MIGRATE and job.phase else kind.value
        if kind is TaskKind.DISCOVER:
            what = "discover of the source (a dry run plans; nothing is staged or loaded)"
        if dry_run.PLAN_PAYLOAD in payload:
            what = f"{kind.value} to inspect the destination (a dry run: nothing is written)"
        await jobs.insert_job_event(
            db,
            job.id,
            f"Dispatched {what} to {runtime_name(task.runtime)}",
            now=self._clock.sql_now(),
            stream=stream or "",
        )
        if agent_id is not None:
            await self._note_if_offline(db, job, agent_id, kind.value, stream or "")

    async def _note_if_offline(
        self, db: Executor, job: Job, agent_id: UUID | None, what: str, stream: str = ""
    ) -> None:
        """A warning on the run's timeline when work waits on an agent that
        is not online (setu_server/service/agents.py)."""
        note = None if agent_id is None else await self._presence.offline_note(db, agent_id, what)
        if note is not None:
            level = EventLevel.WARNING
            now = self._clock.sql_now()
            await jobs.insert_job_event(db, job.id, note, now=now, level=level, stream=stream)

    async def extract_spec(self, runtime: str, task_id: UUID, token: UUID) -> ExtractSpec:
        """What an agent needs to extract: ids, the source with its secret
        references unresolved, and where to stage."""
        job, _ = await self._leased_job(runtime, task_id, token, TaskKind.EXTRACT)
        taken = snapshot_of(job)
        if job.pipeline_id is None:
            raise FailedPrecondition(pipeline_gone(job))
        return ExtractSpec(
            job_id=str(job.id),
            pipeline_id=str(job.pipeline_id),
            source=await connection_spec(self._pool, taken.source_connection_id),
            streams=list(taken.streams),
            blob_prefix=run_prefix(job.workspace_id, job.pipeline_id, job.id),
            blob=self._blob,
            spec=taken.spec,
            write_mode=taken.write_mode,
            cursors=await stream_state.stream_cursors(self._pool, job.pipeline_id),
            stored_parts=await runs.run_parts(self._pool, job.id),
        )

    async def load_spec(self, runtime: str, task_id: UUID, token: UUID) -> LoadSpec:
        """What an agent needs to load: the destination (references
        unresolved), the write mode and the operator chain, and the staged
        data's prefix and manifest."""
        job, task = await self._leased_job(runtime, task_id, token, TaskKind.LOAD)
        taken = snapshot_of(job)
        stream = task.payload.get("stream")
        outputs = await jobs.job_outputs(self._pool, job.id)
        streams = [stream] if stream else [o.stream for o in outputs]
        return LoadSpec(
            job_id=str(job.id),
            pipeline_id=str(job.pipeline_id),
            destination=await connection_spec(self._pool, taken.destination_connection_id),
            write_mode=taken.write_mode,
            spec=taken.spec,
            blob_prefix=run_prefix(job.workspace_id, job.pipeline_id, job.id),
            blob=self._blob,
            streams=streams,
        )

    async def _leased_job(
        self, runtime: str, task_id: UUID, token: UUID, kind: TaskKind
    ) -> tuple[Job, Task]:
        task = await tasks.get_agent_task(self._pool, task_id, runtime)
        if task is None:
            raise NotFound(f"task {task_id} not found")
        if task.state is not TaskState.LEASED or task.lease_token != token:
            raise LeaseLost(f"task {task_id} is not leased with this token")
        if task.kind is not kind:
            raise FailedPrecondition(
                f"task {task_id} is a {task.kind.value} task, not {kind.value}"
            )
        job = await jobs.get_job_any(self._pool, task.job_id)
        assert job is not None, "a task's job outlives it"
        if job.state.terminal or job.cancel_requested:
            raise FailedPrecondition(
                f"run {job.id} {'was cancelled' if job.cancel_requested else 'has ended'}: "
                f"stop this {kind.value}"
            )
        return job, task

    async def _require_online(self, db: Executor, agent_id: UUID) -> None:
        await self._presence.require_online(db, agent_id)

    async def _reread(self, job: Job) -> Job:
        fresh = await jobs.get_job(self._pool, job.id, job.workspace_id)
        assert fresh is not None
        return fresh


def pipeline_gone(job: Job) -> str:
    """Why a run whose pipeline was deleted cannot go on (a run deleted with
    its pipeline is cancelled; one from before that rule, or a race, ends here)."""
    name = snapshot_of(job).pipeline_name
    return f"run {job.id}: its pipeline {name} was deleted; nothing to run"


async def connection_spec(db: Executor, connection_id: UUID) -> ConnectionSpec:
    """A run's connection as its runtime is told it: references unresolved."""
    found = await runs.connection_for_runtime(db, connection_id)
    if found is None:
        raise FailedPrecondition(f"connection {connection_id} no longer exists")
    provider, config, _ = found
    return ConnectionSpec(str(connection_id), provider, config)


def _check_spec(pipeline: PipelineForRun) -> None:
    try:
        parse_spec(pipeline.spec)
    except SpecError as exc:
        raise FailedPrecondition(f"pipeline {pipeline.name} is invalid: {exc}") from exc
