"""What a task's end means for its job.

The runtimes issue gives every kind one meaning: a succeeded task ends its
job SUCCEEDED (with the task's result), a failed one ends it FAILED with
`runtime <kind>: <message>`, or CANCELLED when the job had asked to stop. The
data-flow issues replace entries (an extract hands its run on to a load).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from setu_server.models import EventLevel, Job, JobState, Task, runtime_name
from setu_server.service.lifecycle import JobLifecycle
from setu_server.store import jobs
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
