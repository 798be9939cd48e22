"""What a task's end means for its job.

By default a task's end is its job's end: a succeeded task ends its job
SUCCEEDED (with the task's result), a failed one ends it FAILED with
`runtime <kind>: <message>`, or CANCELLED when the job had asked to stop.
A run's stages override this where a stage hands its run on to the next
(an extract hands its run on to a load).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from setu_agent.engine.staging import run_prefix
from setu_client.errors import InvalidArgument
from setu_server.models import EventLevel, Job, JobState, Phase, Task, TaskKind, runtime_name
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.runs import RunService
from setu_server.store import jobs, runs, tasks
from setu_server.store.catalog import record_discovery
from setu_server.store.db import Executor


class Outcomes(Protocol):
    def success_ends_job(self, result: dict[str, Any]) -> bool:
        """True when a success just ends the job SUCCEEDED with the result:
        then the task and its job change in one statement."""
        ...

    async def succeeded(self, db: Executor, task: Task, result: dict[str, Any]) -> list[Job]: ...

    async def failed(self, db: Executor, task: Task) -> list[Job]: ...


class JobEndsWithItsTask:
    def __init__(self, lifecycle: JobLifecycle, clock_now: Callable[[], datetime | None]) -> None:
        self._lifecycle = lifecycle
        self._now = clock_now

    def success_ends_job(self, result: dict[str, Any]) -> bool:
        return True

    async def succeeded(self, db: Executor, task: Task, result: dict[str, Any]) -> list[Job]:
        moved = await jobs.transition_jobs(
            db,
            [task.job_id],
            JobState.SUCCEEDED,
            now=self._now(),
            message=f"Task {task.kind.value} succeeded on {runtime_name(task.runtime)}",
            result=result,
        )
        return moved

    async def failed(self, db: Executor, task: Task) -> list[Job]:
        job = await jobs.get_job_any(db, task.job_id)
        if job is None or job.state.terminal:
            return []
        if job.cancel_requested:
            return await jobs.transition_jobs(
                db,
                [task.job_id],
                JobState.CANCELLED,
                now=self._now(),
                message=f"Cancelled: {runtime_name(task.runtime)} stopped task {task.kind.value}",
                error_message=job.error_message or "cancelled by request",
            )
        error = f"runtime {task.kind.value}: {task.error_message}"
        return await jobs.transition_jobs(
            db,
            [task.job_id],
            JobState.FAILED,
            now=self._now(),
            message=f"Task {task.kind.value} failed on {runtime_name(task.runtime)}: "
            f"{task.error_message}",
            level=EventLevel.ERROR,
            error_message=error,
        )


class TaskOutcomes(JobEndsWithItsTask):
    """What each kind of task means for its run (docs/flows.md), by the kind
    of the task that ended:

    - `test`, `preview`: the job ends with the task's result (one statement).
    - `discover`: the result updates the connection's catalog, then ends it.
    - `extract` (an agent staged the source): artifacts and counts are
      recorded, the run moves to `load`, and the load is dispatched, to the
      destination's agent or as a cloud `migrate` that resumes at load.
    - `migrate` that handed off (cloud → agent): the load goes to the agent.
    - `load`, and a `migrate` that finished: the run ends with its counts.

    A failure keeps the base meaning: `runtime <kind>: <message>`, or
    CANCELLED when the run asked to stop, unless the run already ended.
    """

    def __init__(
        self,
        lifecycle: JobLifecycle,
        clock_now: Callable[[], datetime | None],
        runs_service: RunService,
    ) -> None:
        super().__init__(lifecycle, clock_now)
        self._runs = runs_service

    async def failed(self, db: Executor, task: Task) -> list[Job]:
        moved = await super().failed(db, task)
        if not moved:
            return moved
        # The run has ended: its other stages (a sibling load) never start.
        await tasks.cancel_pending_tasks(db, task.job_id, self._now())
        if moved[0].state is JobState.CANCELLED:
            await tasks.mark_task_cancelled(db, task.id)
            # What a rolled-back load had counted never landed.
            landed = sum(o.rows_loaded for o in await jobs.job_outputs(db, task.job_id) if o.loaded)
            await runs.set_run_progress(
                db, task.job_id, moved[0].rows_extracted, landed, self._now()
            )
        return moved

    def success_ends_job(self, result: dict[str, Any]) -> bool:
        kind = result.get("kind")
        if kind == "migrate":
            return not result.get("handoff")
        return kind not in ("extract", "load", "discover")

    async def succeeded(self, db: Executor, task: Task, result: dict[str, Any]) -> list[Job]:
        job = await jobs.get_job_any(db, task.job_id)
        if job is None or job.state.terminal:
            return []
        where = runtime_name(task.runtime)
        hands_on = task.kind is TaskKind.EXTRACT or (
            task.kind is TaskKind.MIGRATE and bool(result.get("handoff"))
        )
        if hands_on and job.cancel_requested:
            # Asked to stop while this stage finished: the next one never starts.
            return await jobs.transition_jobs(
                db,
                [job.id],
                JobState.CANCELLED,
                now=self._now(),
                message=f"Cancelled after {task.kind.value} on {where}; the load was not started",
                error_message=job.error_message or "cancelled by request",
            )
        if task.kind is TaskKind.EXTRACT:
            return await self._extracted(db, job, task, result, where)
        if task.kind is TaskKind.MIGRATE and result.get("handoff"):
            return await self._load_next(db, job)
        if task.kind is TaskKind.LOAD:
            return await self._loaded(db, job, task, result, where)
        if task.kind is TaskKind.DISCOVER and job.connection_id is not None:
            found = result.get("streams", [])
            catalog = await record_discovery(db, job.connection_id, found, self._now())
            result = {"streams": catalog}
        return await super().succeeded(db, task, result)

    async def _extracted(
        self, db: Executor, job: Job, task: Task, result: dict[str, Any], where: str
    ) -> list[Job]:
        artifact = result.get("artifact", {})
        prefix = run_prefix(job.workspace_id, job.pipeline_id, job.id)
        if artifact.get("blob_prefix") != prefix:
            # What the janitor later deletes comes from here: only the run's own.
            raise InvalidArgument(f"an extract of run {job.id} stages under {prefix}")
        now = self._now()
        staged = artifact.get("streams", [])
        for stream in staged:
            name, rows, checksum = str(stream["stream"]), int(stream["rows"]), stream["checksum"]
            await runs.save_artifact(
                db,
                job_id=job.id,
                task_id=task.id,
                stream=name,
                blob_prefix=prefix,
                parts=[str(p) for p in stream.get("parts", [])],
                rows=rows,
                checksum=str(checksum),
                now=now,
            )
            await runs.save_output(
                db, job.id, name, now=now, rows_extracted=rows, checksum=str(checksum)
            )
        total = int(result.get("rows_extracted", 0))
        await runs.set_run_plan(db, job.id, now=now, rows_total=total, extract_runtime=where)
        await runs.set_run_progress(db, job.id, total, 0, now)
        moved = await runs.set_run_phase(
            db,
            job.id,
            Phase.LOAD,
            f"Extract finished on {where}: {total} rows of {len(staged)} stream(s) staged",
            now,
        )
        ended = await self._load_next(db, moved or job)
        return ended or ([moved] if moved else [])

    async def _load_next(self, db: Executor, job: Job) -> list[Job]:
        """Dispatches the load of what was staged; a run that staged no
        stream has nothing to load and ends here."""
        if await self._runs.dispatch_load(db, job):
            return []
        return await jobs.transition_jobs(
            db,
            [job.id],
            JobState.SUCCEEDED,
            now=self._now(),
            message="The source offered no streams: nothing to load",
            result={"mode": "staged", "rows_extracted": 0, "rows_loaded": 0},
        )

    async def _loaded(
        self, db: Executor, job: Job, task: Task, result: dict[str, Any], where: str
    ) -> list[Job]:
        """One stream's load (a load task per stream): the run ends with the
        last of them. The job row is locked first, so two loads finishing at
        once cannot both think the other is still running."""
        await jobs.lock_job(db, job.id, job.workspace_id)
        now = self._now()
        by_stream = {str(k): int(v) for k, v in result.get("rows_by_stream", {}).items()}
        for stream, rows in by_stream.items():
            await runs.save_output(db, job.id, stream, now=now, rows_loaded=rows, loaded=True)
            await jobs.insert_job_event(
                db, job.id, f"Loaded {rows} rows on {where}", now=now, stream=stream
            )
        outputs = await jobs.job_outputs(db, job.id)
        loaded = sum(o.rows_loaded for o in outputs)
        await runs.set_run_plan(db, job.id, now=now, load_runtime=where)
        await runs.set_run_progress(db, job.id, job.rows_extracted, loaded, now)
        if await tasks.count_unfinished_tasks(db, job.id):
            return []
        if job.cancel_requested:  # the streams not loaded yet were abandoned
            return await jobs.transition_jobs(
                db,
                [job.id],
                JobState.CANCELLED,
                now=now,
                message=f"Cancelled: {loaded} rows had been loaded on {where}",
                error_message=job.error_message or "cancelled by request",
            )
        return await jobs.transition_jobs(
            db,
            [job.id],
            JobState.SUCCEEDED,
            now=now,
            message=f"Load finished on {where}: {loaded} rows",
            result={"mode": "staged", "rows_extracted": job.rows_extracted, "rows_loaded": loaded},
        )
