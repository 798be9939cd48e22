"""The bookkeeping of a run as a cloud worker moves its data: phase,
progress, staged artifacts and per-stream counts. Every write here is what
a retry or a watcher relies on, so each one commits before the work it
describes goes on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from uuid import UUID

from setu_client.clock import Clock
from setu_engine.staged.staging import StoredPart
from setu_engine.values.window import CursorMark
from setu_server.models import EventLevel, Job, JobOutput, Phase, RowChanges
from setu_server.service.lifecycle import JobLifecycle
from setu_server.store import jobs, runs, stream_state
from setu_server.store.db import Database, Executor, transaction
from setu_tasks.results import Artifact


class RunBook:
    def __init__(self, pool: Database, clock: Clock, lifecycle: JobLifecycle) -> None:
        self._pool = pool
        self._clock = clock
        self._lifecycle = lifecycle

    async def job(self, job_id: UUID) -> Job | None:
        return await jobs.get_job_any(self._pool, job_id)

    async def enter_phase(self, job_id: UUID, phase: Phase, message: str) -> None:
        job = await runs.set_run_phase(self._pool, job_id, phase, message, self._clock.sql_now())
        if job is not None:
            self._lifecycle.published([job])

    async def plan(
        self,
        job_id: UUID,
        *,
        rows_total: int | None = None,
        extract_runtime: str | None = None,
        load_runtime: str | None = None,
        phase: Phase | None = None,
        message: str = "",
    ) -> None:
        """The run's plan; with `phase`, the run moves to it too, and with a
        `message` the timeline says so, all in one transaction."""
        now = self._clock.sql_now()
        async with transaction(self._pool) as conn:
            await runs.set_run_plan(
                conn,
                job_id,
                now=now,
                rows_total=rows_total,
                extract_runtime=extract_runtime,
                load_runtime=load_runtime,
            )
            moved = None
            if phase is not None:
                moved = await runs.set_run_phase(conn, job_id, phase, message, now)
            elif message:
                await jobs.insert_job_event(conn, job_id, message, now=now)
        if moved is not None:
            self._lifecycle.published([moved])

    async def progress(
        self,
        job_id: UUID,
        extracted: int,
        loaded: int,
        stored: Sequence[StoredPart] = (),
        streams: Mapping[str, tuple[int, int]] | None = None,
    ) -> bool:
        """Writes the counts (and each moving stream's, when given), and the
        parts `stored` since the last call (one transaction when there are
        any); True when the run was asked to cancel."""
        now = self._clock.sql_now()
        if not stored:
            return await runs.set_run_progress(self._pool, job_id, extracted, loaded, now, streams)
        async with transaction(self._pool) as conn:
            await runs.record_run_parts(conn, job_id, stored, now)
            return await runs.set_run_progress(conn, job_id, extracted, loaded, now, streams)

    async def record_parts(self, job_id: UUID, stored: Sequence[StoredPart]) -> None:
        """Parts an extract stored whole (an agent's, told in its heartbeat)."""
        await runs.record_run_parts(self._pool, job_id, stored, self._clock.sql_now())

    async def stored_parts(self, job_id: UUID) -> list[StoredPart]:
        """The parts the run's extract stored so far: where a retry resumes."""
        return await runs.run_parts(self._pool, job_id)

    async def staged(self, job_id: UUID, task_id: UUID | None, artifact: Artifact) -> None:
        """Records what the extract staged and moves the run to `load`, in one
        transaction: from here a retry loads and never reads the source."""
        parts = sum(len(s.parts) for s in artifact.streams)
        message = (
            f"Staged {artifact.rows} rows of {len(artifact.streams)} stream(s) in {parts} part(s)"
        )
        async with transaction(self._pool) as conn:
            job = await record_staged(
                conn, job_id, task_id, artifact, message, self._clock.sql_now()
            )
        if job is not None:
            self._lifecycle.published([job])

    async def stream_loaded(
        self,
        job_id: UUID,
        stream: str,
        extracted: int,
        loaded: int,
        checksum: str | None,
        changes: RowChanges | None = None,
        cursor: CursorMark | None = None,
        message: str = "",
        *,
        record_progress: bool = False,
    ) -> list[JobOutput]:
        """Records a stream's committed load; an incremental stream's saved
        cursor advances in the same transaction, to what that load carried,
        and `message` goes in the timeline. With `record_progress` (a
        migrate's last stream), the outputs' sums become the run's counts and
        the outputs are returned; else nothing is."""
        now = self._clock.sql_now()
        async with transaction(self._pool) as conn:
            await record_loaded(
                conn,
                job_id,
                stream,
                loaded,
                now,
                extracted=extracted,
                checksum=checksum,
                changes=changes,
                cursor=cursor,
                message=message,
            )
            if not record_progress:
                return []
            return await _record_progress(conn, job_id, now)

    async def outputs(self, job_id: UUID, *, record_progress: bool = False) -> list[JobOutput]:
        """The run's outputs; with `record_progress`, their sums become the
        run's counts (a finishing migrate's last word on them)."""
        if record_progress:
            return await _record_progress(self._pool, job_id, self._clock.sql_now())
        return await jobs.job_outputs(self._pool, job_id)

    async def event(
        self, job_id: UUID, message: str, *, level: EventLevel = EventLevel.INFO, stream: str = ""
    ) -> None:
        await jobs.insert_job_event(
            self._pool, job_id, message, now=self._clock.sql_now(), level=level, stream=stream
        )


async def _record_progress(db: Executor, job_id: UUID, now: datetime | None) -> list[JobOutput]:
    """The outputs, their sums written as the run's counts."""
    outputs = await jobs.job_outputs(db, job_id)
    extracted = sum(o.rows_extracted for o in outputs)
    loaded = sum(o.rows_loaded for o in outputs)
    await runs.set_run_progress(db, job_id, extracted, loaded, now)
    return outputs


async def record_staged(
    db: Executor,
    job_id: UUID,
    task_id: UUID | None,
    artifact: Artifact,
    message: str,
    now: datetime | None,
) -> Job | None:
    """What an extract staged, wherever it ran: each stream's artifact and
    extracted count, then the run's phase moves to `load` (with `message` in
    its timeline). Call it inside a transaction: from its commit on, a retry
    loads and never reads the source again. Returns the job, moved."""
    for staged in artifact.streams:
        await runs.save_artifact(
            db,
            job_id=job_id,
            task_id=task_id,
            stream=staged.stream,
            blob_prefix=artifact.blob_prefix,
            parts=list(staged.parts),
            rows=staged.rows,
            checksum=staged.checksum,
            now=now,
        )
        await runs.save_output(
            db, job_id, staged.stream, now=now, rows_extracted=staged.rows, checksum=staged.checksum
        )
    return await runs.set_run_phase(db, job_id, Phase.LOAD, message, now)


async def record_loaded(
    db: Executor,
    job_id: UUID,
    stream: str,
    loaded: int,
    now: datetime | None,
    *,
    extracted: int | None = None,
    checksum: str | None = None,
    changes: RowChanges | None = None,
    cursor: CursorMark | None = None,
    message: str = "",
) -> None:
    """A stream's committed load, wherever it ran: its output (loaded, with
    its counts), an incremental stream's saved cursor advanced to what that
    load carried, and `message` in the run's timeline. Call it inside a
    transaction, so they all commit together."""
    await runs.save_output(
        db,
        job_id,
        stream,
        now=now,
        rows_extracted=extracted,
        rows_loaded=loaded,
        checksum=checksum,
        loaded=True,
        changes=changes,
    )
    if cursor is not None:
        await stream_state.advance(db, job_id, stream, cursor, loaded, now)
    if message:
        await jobs.insert_job_event(db, job_id, message, now=now, stream=stream)
