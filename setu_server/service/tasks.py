"""Tasks as runtimes see them: lease (a long-poll), heartbeat, complete, fail.

Every method takes the runtime asking ("cloud", or an agent's id) and only
touches that runtime's tasks. A lease token names one lease; a report that
presents a token no longer live is LeaseLost (FAILED_PRECONDITION), and the
runtime must stop that task.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from setu_client.clock import Clock
from setu_client.errors import ServerClosing
from setu_engine.staged.staging import StoredPart
from setu_server.config import LeasePolicy
from setu_server.hooks import Hooks
from setu_server.metrics import Metrics
from setu_server.models import (
    EventLevel,
    Job,
    Task,
    TaskKind,
    TaskState,
    runtime_name,
)
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.outcomes import TaskOutcomes
from setu_server.service.signals import TaskSignals
from setu_server.service.watch import CLOCK_SLACK
from setu_server.store import jobs, runs, tasks
from setu_server.store.completer import Completion, TaskCompleter
from setu_server.store.db import Connection, Database, Executor, transaction
from setu_server.store.group_commit import GroupCommit
from setu_tasks.results import TaskResult

# A leased task, and its job if this lease moved it to running (once per job).
_Row = tuple[Task, Job | None]


class TaskService:
    def __init__(
        self,
        pool: Database,
        clock: Clock,
        lifecycle: JobLifecycle,
        signals: TaskSignals,
        policy: LeasePolicy,
        outcomes: TaskOutcomes | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._lifecycle = lifecycle
        self._signals = signals
        self.policy = policy
        self.outcomes = outcomes or TaskOutcomes(lifecycle, clock.sql_now)
        self._metrics = metrics or Metrics(clock, process=False)
        # `parked`: a LeaseTask found nothing and is about to wait (its runtime).
        self.hooks: Hooks[str] = Hooks("parked")
        # Concurrent leases and completions share a transaction (and its commit).
        self.group: GroupCommit[_Row] = GroupCommit(pool, self._lease_rows)
        self.completer = TaskCompleter(self.group, self.outcomes, clock)

    # -- leasing

    async def lease(self, runtime: str, wait_seconds: float) -> Task | None:
        """A task of `runtime`, as soon as one is eligible, or None after the wait."""
        leased = await self.lease_many(runtime, wait_seconds, 1)
        return leased[0] if leased else None

    async def lease_many(self, runtime: str, wait_seconds: float, max_tasks: int) -> list[Task]:
        """Up to `max_tasks` tasks of `runtime`, as soon as any is eligible,
        or none after the wait.
        A closing server leases nothing: a new call is refused (UNAVAILABLE, so
        the runtime backs off and finds another replica), a parked one ends
        empty, without another lease."""
        if self._signals.closing.is_set():
            raise ServerClosing("this server is shutting down: try again shortly")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, min(wait_seconds, self.policy.wait_cap_seconds))
        parked = False
        with self._signals.listen(runtime) as signal:
            while True:
                woken = signal.armed()
                if self._signals.closing.is_set():
                    return []
                leased = await self._lease_once(runtime, max_tasks)
                if leased:
                    return leased
                remaining = deadline - loop.time()
                if remaining < CLOCK_SLACK or self._signals.closing.is_set():
                    return []
                if not parked:
                    parked = True
                    await self.hooks.parked(runtime)
                pause = min(remaining, await self._until_next_eligible(runtime))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await woken.wait()

    async def _until_next_eligible(self, runtime: str) -> float:
        """Seconds until a delayed (retrying) task becomes eligible, or the fallback poll."""
        seconds = await tasks.seconds_to_next_eligible(self._pool, runtime, self._clock.sql_now())
        if seconds is None:
            return self.policy.poll_seconds
        return max(CLOCK_SLACK, min(self.policy.poll_seconds, seconds))

    async def _lease_once(self, runtime: str, max_tasks: int) -> list[Task]:
        return self._leased(await self.group.lease(runtime, max_tasks))

    async def _lease_rows(self, db: Executor, runtime: str, count: int) -> list[_Row]:
        """The lease statement: `count` fresh tokens, of which the oldest
        eligible tasks of `runtime` take as many as there are."""
        rows = await tasks.lease_tasks(
            db,
            runtime,
            [uuid.uuid4() for _ in range(count)],
            self.policy.ttl_seconds,
            self._clock.sql_now(),
        )
        # A moved job rides on its first task only: the rows may be dealt to
        # several callers, and each publishes its own.
        seen: set[UUID] = set()
        once: list[_Row] = []
        for task, job in rows:
            once.append((task, job if job is not None and job.id not in seen else None))
            seen.add(task.job_id)
        return once

    def _leased(self, leased: list[_Row]) -> list[Task]:
        """Once committed: count the leases, publish the jobs they started."""
        for task, _ in leased:
            self._metrics.task_leased(task)
        moved = [job for _, job in leased if job is not None]
        if moved:
            self._lifecycle.moved(moved)
        return [task for task, _ in leased]

    # -- reports

    async def heartbeat(
        self,
        runtime: str,
        task_id: UUID,
        token: UUID,
        progress: dict[str, Any] | None,
        stored: Sequence[StoredPart] = (),
    ) -> tuple[datetime, bool]:
        """Extends the lease; an extract's `stored` parts (metadata only: the
        agent keeps its secrets) go in its run's books, so a retry or a
        hand-back resumes after them."""
        beat = await tasks.heartbeat_task(
            self._pool,
            task_id,
            runtime,
            token,
            self.policy.ttl_seconds,
            progress,
            self._clock.sql_now(),
        )
        if beat is None:
            raise await self._lost(runtime, task_id)
        if stored:
            task = await tasks.get_agent_task(self._pool, task_id, runtime)
            if task is not None and task.kind is TaskKind.EXTRACT:
                await runs.record_run_parts(self._pool, task.job_id, stored, self._clock.sql_now())
        return beat

    async def complete(
        self,
        runtime: str,
        task_id: UUID,
        token: UUID,
        result: TaskResult | None,
        *,
        lease_next: bool = False,
    ) -> Task | None:
        """Record success once; the same completion again is accepted quietly.
        A result must be of the task's kind; none at all completes nothing.

        `lease_next` (an eager lease): also lease the runtime's next eligible
        task, without waiting, in the completion's own transaction, so the
        two commit (and notify) once; a refused completion leases nothing.
        None from a closing server.

        Decided here once (does the success end the job?), recorded by the
        completer (setu_server/store/completer.py: completions and leases
        arriving together share one transaction, each completion rolls back
        alone if refused), published here after commit."""
        completion = Completion(
            task_id,
            runtime,
            token,
            result,
            ends_job=result is not None and self.outcomes.success_ends_job(result),
            lease_next=lease_next and not self._signals.closing.is_set(),
        )
        done, leased = await self.completer.complete(completion)
        if done.ended is not None:
            self._lifecycle.moved([done.ended])
        if done.changed:
            self._lifecycle.published(done.changed)
        handed = self._leased(leased)
        return handed[0] if handed else None

    async def fail(
        self, runtime: str, task_id: UUID, token: UUID, error: str, retryable: bool
    ) -> bool:
        """Record a failure; True when the task will run again (never for a
        run that asked to stop or has ended: the statement decides)."""
        async with transaction(self._pool) as conn:
            task = await tasks.fail_task(
                conn,
                task_id,
                runtime,
                token,
                error,
                backoff_seconds=self.policy.retry_backoff_seconds,
                max_backoff=self.policy.max_backoff_seconds,
                retryable=retryable,
                now=self._clock.sql_now(),
            )
            if task is None:
                # Nothing failed: fine if this lease already reported it.
                current = await tasks.own_task(conn, task_id, runtime)
                if current.lease_token == token and current.state in (
                    TaskState.FAILED,
                    TaskState.PENDING,
                ):
                    return current.state is TaskState.PENDING
                raise tasks.lease_lost(current)
            changed = await self._after_failure(conn, task)
        self._metrics.task_failed(task, retryable)
        self._lifecycle.published(changed)
        return task.state is TaskState.PENDING

    async def release(
        self,
        runtime: str,
        task_id: UUID,
        token: UUID,
        *,
        outage: bool,
        message: str,
        checkpoint: str,
    ) -> tuple[bool, bool]:
        """Hand a leased task back without spending an attempt: its runtime
        is stopping (a drain: pending at once), or a database it works on
        went away for a moment (an outage: after the backoff, while free
        retries remain). (free, will run again): past the free retries, or
        when the job asked to stop or ended, it is recorded as a retryable
        failure would be."""
        async with transaction(self._pool) as conn:
            task = await tasks.release_task(
                conn,
                task_id,
                runtime,
                token,
                message,
                outage=outage,
                backoff_seconds=self.policy.retry_backoff_seconds,
                max_backoff=self.policy.max_backoff_seconds,
                free_retries=self.policy.outage_free_retries,
                now=self._clock.sql_now(),
            )
            if task is not None:
                await jobs.insert_job_event(
                    conn,
                    task.job_id,
                    self._released_event(task, outage, message, checkpoint),
                    now=self._clock.sql_now(),
                    level=EventLevel.WARNING if outage else EventLevel.INFO,
                )
            else:
                current = await tasks.own_task(conn, task_id, runtime)
                if not tasks.lease_live(current, token, self._clock.now()):
                    raise tasks.lease_lost(current)
        if task is not None:
            self._metrics.task_released(task, outage)
            return True, True
        # Not free: the job stops or ended, or the outages' free retries are spent.
        spent = (
            f" (its {self.policy.outage_free_retries} free retries for outages are spent)"
            if outage and current.free_retries >= self.policy.outage_free_retries
            else ""
        )
        return False, await self.fail(runtime, task_id, token, message + spent, True)

    def _released_event(self, task: Task, outage: bool, message: str, checkpoint: str) -> str:
        at = f" at {checkpoint}" if checkpoint else ""
        counts = f"attempt {task.attempt} of {task.max_attempts}"
        if outage:
            delay = (task.run_after - task.updated_at).total_seconds()
            return (
                f"Task {task.kind.value} lost its database on {runtime_name(task.runtime)}"
                f"{at}: {message}; retrying in {delay:g} s without spending an attempt "
                f"(free retry {task.free_retries} of {self.policy.outage_free_retries}; "
                f"{counts})"
            )
        return (
            f"{message}: task {task.kind.value} handed back{at}; it runs again at once, "
            f"no attempt spent ({counts})"
        )

    async def _after_failure(self, conn: Connection, task: Task) -> list[Job]:
        if task.state is TaskState.PENDING:
            backoff = (task.run_after - task.updated_at).total_seconds()
            await jobs.insert_job_event(
                conn,
                task.job_id,
                f"Task {task.kind.value} failed on {runtime_name(task.runtime)}: "
                f"{task.error_message}; retrying in {backoff:g} s "
                f"(attempt {task.attempt} of {task.max_attempts})",
                now=self._clock.sql_now(),
                level=EventLevel.WARNING,
            )
            return []
        return await self.outcomes.failed(conn, task)

    async def fail_runtime(self, runtime: str, reason: str) -> int:
        """Fail every queued or held task of a runtime and their jobs (agent deactivated)."""
        async with transaction(self._pool) as conn:
            failed = await tasks.fail_agent_tasks(conn, runtime, reason, self._clock.sql_now())
            # Set-based: thousands of tasks end in a few statements.
            changed = await self.outcomes.failed_many(conn, failed)
        self._lifecycle.published(changed)
        return len(failed)

    async def _lost(self, runtime: str, task_id: UUID) -> Exception:
        return tasks.lease_lost(await tasks.own_task(self._pool, task_id, runtime))
