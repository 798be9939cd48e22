"""A cloud worker's `migrate` task keeping its run's books.

The worker runs apart from the server and holds no database credentials, so
everything a run's cloud part reads and writes while it moves data comes
through here (CloudRunService). Each call names a task and its lease: only
the cloud's live lease on a `migrate` task opens the run's books, so a
worker touches nothing but the runs it is working on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from uuid import UUID

from setu_client.clock import Clock
from setu_client.errors import FailedPrecondition, InvalidArgument, LeaseLost, NotFound
from setu_engine.staged.blob import BlobSettings
from setu_engine.staged.staging import StoredPart, run_prefix
from setu_engine.values.window import CursorMark
from setu_server.models import (
    CLOUD,
    EventLevel,
    Job,
    JobOutput,
    Phase,
    RowChanges,
    TaskKind,
)
from setu_server.service.runbook import RunBook
from setu_server.service.runs import connection_spec, pipeline_gone, snapshot_of
from setu_server.store import jobs, stream_state, tasks
from setu_server.store.db import Database
from setu_tasks.results import Artifact
from setu_tasks.specs import MigrateSpec


class CloudRuns:
    def __init__(self, pool: Database, clock: Clock, book: RunBook, blob: BlobSettings) -> None:
        self._pool = pool
        self._clock = clock
        self._book = book
        self._blob = blob

    async def _run(self, task_id: UUID, token: UUID) -> Job:
        """The run of a migrate task the cloud holds with this lease."""
        task = await tasks.get_agent_task(self._pool, task_id, CLOUD)
        if task is None or task.kind is not TaskKind.MIGRATE:
            raise NotFound(f"task {task_id} not found")
        if not tasks.lease_live(task, token, self._clock.now()):
            raise LeaseLost(f"lease lost on task {task_id}; stop working on it")
        job = await jobs.get_job_any(self._pool, task.job_id)
        assert job is not None, "a task's job outlives it"
        return job

    async def spec(self, task_id: UUID, token: UUID) -> MigrateSpec:
        job = await self._run(task_id, token)
        taken = snapshot_of(job)
        if job.pipeline_id is None:
            raise FailedPrecondition(pipeline_gone(job))
        # Three independent reads, on three pooled connections at once: a
        # small run waits for this answer before it can start.
        source, destination, cursors, stored = await asyncio.gather(
            connection_spec(self._pool, taken.source_connection_id),
            connection_spec(self._pool, taken.destination_connection_id),
            stream_state.stream_cursors(self._pool, job.pipeline_id),
            self._book.stored_parts(job.id),
        )
        return MigrateSpec(
            job_id=str(job.id),
            workspace_id=str(job.workspace_id),
            pipeline_id=str(job.pipeline_id),
            source=source,
            destination=destination,
            streams=list(taken.streams),
            spec=taken.spec,
            write_mode=taken.write_mode,
            phase=job.phase.value if job.phase else None,
            dry_run=job.dry_run,
            load_on_agent=taken.placement.load_agent is not None,
            rows_extracted=job.rows_extracted,
            blob_prefix=run_prefix(job.workspace_id, job.pipeline_id, job.id),
            blob=self._blob,
            cancel_requested=job.cancel_requested,
            ended=job.state.terminal,
            cursors=cursors,
            stored_parts=stored,
        )

    async def plan(
        self,
        task_id: UUID,
        token: UUID,
        rows_total: int | None,
        extract: bool,
        load: bool,
        phase: Phase | None = None,
        message: str = "",
    ) -> None:
        job = await self._run(task_id, token)
        await self._book.plan(
            job.id,
            rows_total=rows_total,
            extract_runtime=CLOUD if extract else None,
            load_runtime=CLOUD if load else None,
            phase=phase,
            message=message,
        )

    async def enter_phase(self, task_id: UUID, token: UUID, phase: Phase, message: str) -> None:
        job = await self._run(task_id, token)
        await self._book.enter_phase(job.id, phase, message)

    async def progress(
        self,
        task_id: UUID,
        token: UUID,
        extracted: int,
        loaded: int,
        stored: Sequence[StoredPart] = (),
        streams: Mapping[str, tuple[int, int]] | None = None,
    ) -> bool:
        job = await self._run(task_id, token)
        return await self._book.progress(job.id, extracted, loaded, stored, streams)

    async def staged(self, task_id: UUID, token: UUID, artifact: Artifact) -> None:
        job = await self._run(task_id, token)
        if job.pipeline_id is None:
            raise FailedPrecondition(pipeline_gone(job))
        prefix = run_prefix(job.workspace_id, job.pipeline_id, job.id)
        if artifact.blob_prefix != prefix:
            raise InvalidArgument(f"artifact.blob_prefix: run {job.id} stages under {prefix}")
        if job.state.terminal:
            raise FailedPrecondition(f"run {job.id} has ended: stop this migrate")
        await self._book.staged(job.id, task_id, artifact)

    async def stream_loaded(
        self,
        task_id: UUID,
        token: UUID,
        stream: str,
        extracted: int,
        loaded: int,
        checksum: str,
        changes: RowChanges | None = None,
        cursor: CursorMark | None = None,
        message: str = "",
        *,
        record_progress: bool = False,
    ) -> list[JobOutput]:
        job = await self._run(task_id, token)
        return await self._book.stream_loaded(
            job.id,
            stream,
            extracted,
            loaded,
            checksum or None,
            changes,
            cursor,
            message,
            record_progress=record_progress,
        )

    async def outputs(
        self, task_id: UUID, token: UUID, *, record_progress: bool = False
    ) -> list[JobOutput]:
        job = await self._run(task_id, token)
        return await self._book.outputs(job.id, record_progress=record_progress)

    async def event(
        self, task_id: UUID, token: UUID, message: str, level: EventLevel, stream: str
    ) -> None:
        job = await self._run(task_id, token)
        await self._book.event(job.id, message, level=level, stream=stream)
