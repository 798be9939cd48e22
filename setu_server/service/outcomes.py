"""What a task's end means for its job, by the kind of the task that ended
(docs/flows.md).

A success means what its kind's entry in `TaskOutcomes` says:

| kind       | outcome                  | what it does                                   |
| ---------- | ------------------------ | ---------------------------------------------- |
| `test`     | EndsTestJob              | ok: as EndsJobWithResult; not ok: the job      |
|            |                          | FAILED with the test's message and result      |
| `preview`  | EndsJobWithResult        | the same                                       |
| `discover` | UpdatesCatalog           | the catalog takes the streams; the job ends    |
|            | PlansDryRun (of a run)   | a dry run's source agent discovered: the plan  |
|            |                          | is made here and goes on to where the load     |
|            |                          | would run (service/dry_runs.py)                |
| `extract`  | RecordsStagedThenLoads   | an agent staged: recorded, the load dispatched |
| `migrate`  | HandsOffOrEndsRun        | a hand-off dispatches the load to an agent;    |
|            |                          | a finished migrate ends the run (one statement)|
|            |                          | a dry run's plan ends the run, or goes on to   |
|            |                          | the destination's agent                        |
| `load`     | LastLoadEndsRun          | one stream loaded; the last one ends the run;  |
|            |                          | a dry run's (it wrote nothing) ends it         |

A failure means the same for every kind: the job fails with
`runtime <kind>: <message>`, or ends CANCELLED when it had asked to stop,
unless it already ended; its other pending tasks never start.

Every job transition goes through JobLifecycle, inside the caller's
transaction: TaskService publishes the moved jobs after commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar
from uuid import UUID

from setu_client.errors import InvalidArgument
from setu_engine.errors import ConfigError, ProviderError, SpecError
from setu_engine.movement import transfer
from setu_engine.staged.staging import run_prefix
from setu_server.models import EventLevel, Job, JobKind, JobState, Task, TaskKind, runtime_name
from setu_server.service.dry_runs import DryRunPlans
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.runbook import record_loaded, record_staged
from setu_server.service.runs import RunService, snapshot_of
from setu_server.store import jobs, runs, tasks
from setu_server.store.catalog import record_discovery
from setu_server.store.db import Executor
from setu_tasks.results import (
    DiscoverResult,
    ExtractResult,
    LoadResult,
    MalformedResult,
    MigrateMode,
    MigrateResult,
    TaskResult,
    TestResult,
    changes_said,
)

Now = Callable[[], datetime | None]
R = TypeVar("R")


class EndedTask(Protocol):
    """What a failure's meaning reads of its task: a Task, or the narrow row
    of a statement that failed thousands (store.tasks.EndedTask)."""

    @property
    def id(self) -> UUID: ...
    @property
    def job_id(self) -> UUID: ...
    @property
    def kind(self) -> TaskKind: ...
    @property
    def runtime(self) -> str: ...
    @property
    def error_message(self) -> str: ...


class Outcome(Protocol):
    """What a succeeded task of one kind means for its job."""

    def ends_job(self, result: TaskResult) -> bool:
        """True when the success just ends the job SUCCEEDED with the result:
        then the task and its job change in one statement, and `succeeded`
        is not called."""
        ...

    async def succeeded(
        self, db: Executor, task: Task, job: Job, result: TaskResult
    ) -> list[Job]: ...


class EndsJobWithResult:
    def __init__(self, lifecycle: JobLifecycle) -> None:
        self._lifecycle = lifecycle

    def ends_job(self, result: TaskResult) -> bool:
        return True

    async def succeeded(self, db: Executor, task: Task, job: Job, result: TaskResult) -> list[Job]:
        return await _succeed(self._lifecycle, db, task, result.to_json())


class EndsTestJob:
    """A test that ran and found the connection broken is a failed job, so a
    job listing shows it failed; its result still carries ok and the message."""

    def __init__(self, lifecycle: JobLifecycle) -> None:
        self._lifecycle = lifecycle

    def ends_job(self, result: TaskResult) -> bool:
        return _expect(result, TestResult).ok

    async def succeeded(self, db: Executor, task: Task, job: Job, result: TaskResult) -> list[Job]:
        tested = _expect(result, TestResult)
        if tested.ok:
            return await _succeed(self._lifecycle, db, task, tested.to_json())
        return await self._lifecycle.transition_many(
            [task.job_id],
            JobState.FAILED,
            f"Connection test failed on {runtime_name(task.runtime)}: {tested.message}",
            db=db,
            level=EventLevel.ERROR,
            error_message=tested.message,
            result=tested.to_json(),
        )


class UpdatesCatalog:
    def __init__(self, lifecycle: JobLifecycle, now: Now) -> None:
        self._lifecycle = lifecycle
        self._now = now

    def ends_job(self, result: TaskResult) -> bool:
        return False

    async def succeeded(self, db: Executor, task: Task, job: Job, result: TaskResult) -> list[Job]:
        found = _expect(result, DiscoverResult)
        if job.connection_id is None:
            return await _succeed(self._lifecycle, db, task, found.to_json())
        offered = [s.to_dict() for s in found.streams]
        catalog = await record_discovery(db, job.connection_id, offered, self._now())
        return await _succeed(self._lifecycle, db, task, {"streams": catalog})


class PlansDryRun:
    """A dry run whose source is on an agent ran a `discover` there (the
    source opened, nothing staged): the source half of the plan is made from
    what it offers, and goes on to where the load would run, which inspects
    the destination (service/dry_runs.py)."""

    def __init__(self, lifecycle: JobLifecycle, plans: DryRunPlans) -> None:
        self._lifecycle = lifecycle
        self._plans = plans

    def ends_job(self, result: TaskResult) -> bool:
        return False

    async def succeeded(self, db: Executor, task: Task, job: Job, result: TaskResult) -> list[Job]:
        found = _expect(result, DiscoverResult)
        taken = snapshot_of(job)
        try:
            streams = transfer.select_streams(found.streams, taken.streams)
            return await self._plans.source_discovered(db, task, job, streams, found.samples)
        except (ConfigError, SpecError, ProviderError) as exc:
            return await self._lifecycle.transition_many(
                [job.id],
                JobState.FAILED,
                f"Dry run could not be planned: {exc}",
                db=db,
                level=EventLevel.ERROR,
                error_message=f"dry run: {exc}",
            )


class _HandsOnToLoad:
    """A stage after which the run goes on at `load` (unless it asked to stop)."""

    def __init__(self, lifecycle: JobLifecycle, now: Now, runs_service: RunService) -> None:
        self._lifecycle = lifecycle
        self._now = now
        self._runs = runs_service

    async def _cancelled_instead(self, db: Executor, task: Task, job: Job) -> list[Job] | None:
        if not job.cancel_requested:
            return None
        # Asked to stop while this stage finished: the next one never starts.
        return await self._lifecycle.transition_many(
            [job.id],
            JobState.CANCELLED,
            f"Cancelled after {task.kind.value} on {runtime_name(task.runtime)}; "
            f"the load was not started",
            db=db,
            error_message=job.error_message or "cancelled by request",
        )

    async def _load_next(self, db: Executor, job: Job) -> list[Job]:
        """Dispatches the load of what was staged; a run that staged no
        stream has nothing to load and ends here."""
        if await self._runs.dispatch_load(db, job):
            return []
        return await self._lifecycle.transition_many(
            [job.id],
            JobState.SUCCEEDED,
            "Nothing staged, nothing to load: the source offered no streams, or none had "
            "changed since the last run (incremental)",
            db=db,
            result={"mode": "staged", "rows_extracted": 0, "rows_loaded": 0},
        )


class RecordsStagedThenLoads(_HandsOnToLoad):
    """An agent's extract: what it staged is recorded, the run moves to
    `load`, and the load goes to the destination's agent, or to the cloud as
    a `migrate` that resumes at load."""

    def ends_job(self, result: TaskResult) -> bool:
        return False

    async def succeeded(self, db: Executor, task: Task, job: Job, result: TaskResult) -> list[Job]:
        extracted = _expect(result, ExtractResult)
        cancelled = await self._cancelled_instead(db, task, job)
        if cancelled is not None:
            return cancelled
        prefix = run_prefix(job.workspace_id, job.pipeline_id, job.id)
        if extracted.artifact.blob_prefix != prefix:
            # What the janitor later deletes comes from here: only the run's own.
            raise InvalidArgument(f"an extract of run {job.id} stages under {prefix}")
        where = runtime_name(task.runtime)
        now = self._now()
        total = extracted.rows_extracted
        await runs.set_run_plan(db, job.id, now=now, rows_total=total, extract_runtime=where)
        await runs.set_run_progress(db, job.id, total, 0, now)
        for stream, said in extracted.notes:  # what it read, as a cloud extract says it
            await jobs.insert_job_event(db, job.id, said, now=now, stream=stream)
        streams = len(extracted.artifact.streams)
        moved = await record_staged(
            db,
            job.id,
            task.id,
            extracted.artifact,
            f"Extract finished on {where}: {total} rows of {streams} stream(s) staged",
            now,
        )
        ended = await self._load_next(db, moved or job)
        return ended or ([moved] if moved else [])


class HandsOffOrEndsRun(_HandsOnToLoad):
    """The cloud's part of a run: finished, it ends the run with its counts
    (one statement); handed off (cloud → agent), the load goes to the agent."""

    def __init__(
        self, lifecycle: JobLifecycle, now: Now, runs_service: RunService, plans: DryRunPlans
    ) -> None:
        super().__init__(lifecycle, now, runs_service)
        self._plans = plans

    def ends_job(self, result: TaskResult) -> bool:
        migrated = _expect(result, MigrateResult)
        return not migrated.hands_off and migrated.mode is not MigrateMode.DRY_RUN

    async def succeeded(self, db: Executor, task: Task, job: Job, result: TaskResult) -> list[Job]:
        migrated = _expect(result, MigrateResult)
        if migrated.mode is MigrateMode.DRY_RUN:
            return await self._plans.planned(db, task, job, migrated.planned)
        if not migrated.hands_off:
            return await _succeed(self._lifecycle, db, task, result.to_json())
        cancelled = await self._cancelled_instead(db, task, job)
        if cancelled is not None:
            return cancelled
        return await self._load_next(db, job)


class LastLoadEndsRun:
    """One stream's load (a load task per stream): the run ends with the
    last of them. The job row is locked first, so two loads finishing at
    once cannot both think the other is still running."""

    def __init__(self, lifecycle: JobLifecycle, now: Now, plans: DryRunPlans) -> None:
        self._lifecycle = lifecycle
        self._now = now
        self._plans = plans

    def ends_job(self, result: TaskResult) -> bool:
        return False

    async def succeeded(self, db: Executor, task: Task, job: Job, result: TaskResult) -> list[Job]:
        loaded_now = _expect(result, LoadResult)
        if loaded_now.dry_run:
            return await self._plans.end(db, task, job, loaded_now.planned)
        where = runtime_name(task.runtime)
        await jobs.lock_job(db, job.id, job.workspace_id)
        now = self._now()
        for stream, said in loaded_now.notes:
            await jobs.insert_job_event(db, job.id, f"{said} on {where}", now=now, stream=stream)
        for stream, rows in loaded_now.rows_by_stream.items():
            changes = loaded_now.changes_by_stream.get(stream)
            # Committed at the edge: its books (and saved cursor) follow.
            await record_loaded(
                db,
                job.id,
                stream,
                rows,
                now,
                changes=changes,
                cursor=loaded_now.cursors_by_stream.get(stream),
                message=f"Loaded {rows} rows on {where}{changes_said(changes)}",
            )
        outputs = await jobs.job_outputs(db, job.id)
        loaded = sum(o.rows_loaded for o in outputs)
        await runs.set_run_plan(db, job.id, now=now, load_runtime=where)
        await runs.set_run_progress(db, job.id, job.rows_extracted, loaded, now)
        if await tasks.count_unfinished_tasks(db, job.id):
            return []
        # Asked to stop, yet every stream's load committed (the cancel came
        # too late to stop the last): the run happened.
        if job.cancel_requested and not all(o.loaded for o in outputs):
            return await self._lifecycle.transition_many(
                [job.id],
                JobState.CANCELLED,
                f"Cancelled: {loaded} rows had been loaded on {where}",
                db=db,
                error_message=job.error_message or "cancelled by request",
            )
        return await self._lifecycle.transition_many(
            [job.id],
            JobState.SUCCEEDED,
            f"Load finished on {where}: {loaded} rows",
            db=db,
            result={"mode": "staged", "rows_extracted": job.rows_extracted, "rows_loaded": loaded},
        )


class TaskOutcomes:
    """The table of outcomes by task kind, and the one meaning of a failure.
    Without a RunService only connection operations (test, discover,
    preview) have an outcome."""

    def __init__(
        self, lifecycle: JobLifecycle, clock_now: Now, runs_service: RunService | None = None
    ) -> None:
        self._lifecycle = lifecycle
        self._now = clock_now
        ends = EndsJobWithResult(lifecycle)
        self.by_kind: dict[TaskKind, Outcome] = {
            TaskKind.TEST: EndsTestJob(lifecycle),
            TaskKind.PREVIEW: ends,
            TaskKind.DISCOVER: UpdatesCatalog(lifecycle, clock_now),
        }
        self._dry_run: PlansDryRun | None = None
        if runs_service is not None:
            plans = DryRunPlans(lifecycle, runs_service)
            self._dry_run = PlansDryRun(lifecycle, plans)
            self.by_kind |= {
                TaskKind.EXTRACT: RecordsStagedThenLoads(lifecycle, clock_now, runs_service),
                TaskKind.MIGRATE: HandsOffOrEndsRun(lifecycle, clock_now, runs_service, plans),
                TaskKind.LOAD: LastLoadEndsRun(lifecycle, clock_now, plans),
            }

    def outcome(self, kind: TaskKind) -> Outcome:
        found = self.by_kind.get(kind)
        if found is None:
            raise InvalidArgument(f"this server takes no results of {kind.value} tasks")
        return found

    def success_ends_job(self, result: TaskResult) -> bool:
        """True when the success just ends the job SUCCEEDED with the result
        (decided by the kind the result claims; the statement that completes
        the task checks the task is of that kind)."""
        return self.outcome(TaskKind(result.kind)).ends_job(result)

    async def succeeded(self, db: Executor, task: Task, result: TaskResult) -> list[Job]:
        job = await jobs.get_job_any(db, task.job_id)
        if job is None or job.state.terminal:
            return []
        if self._dry_run and job.kind is JobKind.RUN and task.kind is TaskKind.DISCOVER:
            return await self._dry_run.succeeded(db, task, job, result)
        return await self.outcome(task.kind).succeeded(db, task, job, result)

    async def failed(self, db: Executor, task: Task) -> list[Job]:
        return await self.failed_many(db, [task])

    async def failed_many(self, db: Executor, failed: Sequence[EndedTask]) -> list[Job]:
        """`failed` for many tasks at once (an agent deactivated: thousands),
        set-based: a handful of statements whatever their number, never one
        per job. A job is ended by its first task of the list (the others
        find it ended, as one by one they would); each moved job still gets
        its own event, version bump and notification (the transition
        function's, once per job)."""
        first: dict[UUID, EndedTask] = {}
        for task in failed:
            first.setdefault(task.job_id, task)
        if not first:
            return []
        asked = await jobs.jobs_asked_to_cancel(db, list(first))
        # One transition per (target state, event message, error): the jobs
        # of a group share them. A few groups: kinds x causes, not jobs.
        groups: dict[tuple[JobState, str, EventLevel, str | None], list[UUID]] = {}
        for job_id, task in first.items():
            where = runtime_name(task.runtime)
            if job_id in asked:
                # Null keeps the reason the cancel left waiting.
                key = (
                    JobState.CANCELLED,
                    f"Cancelled: {where} stopped task {task.kind.value}",
                    EventLevel.INFO,
                    None if asked[job_id] else "cancelled by request",
                )
            else:
                key = (
                    JobState.FAILED,
                    f"Task {task.kind.value} failed on {where}: {task.error_message}",
                    EventLevel.ERROR,
                    f"runtime {task.kind.value}: {task.error_message}",
                )
            groups.setdefault(key, []).append(job_id)
        moved: list[Job] = []
        for (to, message, level, error), ids in groups.items():
            moved += await self._lifecycle.transition_many(
                ids, to, message, db=db, level=level, error_message=error
            )
        if not moved:
            return moved
        # The jobs have ended: their other stages (a sibling load) never start.
        await tasks.cancel_pending_tasks_of_jobs(db, [j.id for j in moved], self._now())
        cancelled = [j for j in moved if j.state is JobState.CANCELLED]
        if cancelled:
            await tasks.mark_tasks_cancelled(db, [first[j.id].id for j in cancelled])
        for job in cancelled:
            # What a rolled-back load had counted never landed. (Per job, but
            # only for the jobs that were already stopping: a few at most.)
            landed = sum(o.rows_loaded for o in await jobs.job_outputs(db, job.id) if o.loaded)
            await runs.set_run_progress(db, job.id, job.rows_extracted, landed, self._now())
        return moved


async def _succeed(
    lifecycle: JobLifecycle, db: Executor, task: Task, result: dict[str, Any]
) -> list[Job]:
    return await lifecycle.transition_many(
        [task.job_id],
        JobState.SUCCEEDED,
        f"Task {task.kind.value} succeeded on {runtime_name(task.runtime)}",
        db=db,
        result=result,
    )


def _expect(result: TaskResult, kind: type[R]) -> R:
    if not isinstance(result, kind):
        raise MalformedResult(f"expected a {kind.__name__}, got a {type(result).__name__}")
    return result
