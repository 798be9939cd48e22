"""The reaper: leases that ran out go back to their queue, or fail their job
when attempts are spent. Safe on every replica at once (SKIP LOCKED)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Protocol
from uuid import UUID

from setu_client.clock import Clock
from setu_server.config import LeasePolicy, ReaperSettings
from setu_server.maintenance.periodic import PeriodicService
from setu_server.metrics import Metrics
from setu_server.models import EventLevel, Job, Task, TaskState, runtime_name
from setu_server.service.lifecycle import JobLifecycle
from setu_server.store import jobs, tasks
from setu_server.store.db import Database, Executor, transaction

log = logging.getLogger(__name__)


class FailedTasks(Protocol):
    """What happens to a job whose task failed for good (service/outcomes.py)."""

    async def failed(self, db: Executor, task: Task) -> list[Job]: ...


@dataclass(frozen=True)
class ReapResult:
    requeued: list[UUID] = field(default_factory=list)
    failed: list[UUID] = field(default_factory=list)

    @property
    def reaped(self) -> int:
        return len(self.requeued) + len(self.failed)


class Reaper(PeriodicService[ReapResult]):
    name = "reaper"

    def __init__(
        self,
        db: Database,
        clock: Clock,
        lifecycle: JobLifecycle,
        outcomes: FailedTasks,
        policy: LeasePolicy,
        settings: ReaperSettings | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings or ReaperSettings()
        super().__init__(self.settings.interval_seconds)
        # The task service's own policy, read at each pass: a requeued task
        # backs off exactly as a failed one does, from one setting.
        self._policy = policy
        self._db = db
        self._clock = clock
        self._lifecycle = lifecycle
        self._outcomes = outcomes
        self._metrics = metrics or Metrics(clock, process=False)

    async def run_once(self) -> ReapResult:
        """Reap until no expired lease is left."""
        requeued: list[UUID] = []
        failed: list[UUID] = []
        while reaped := await self._reap_batch():
            requeued += [t.id for t in reaped if t.state is TaskState.PENDING]
            failed += [t.id for t in reaped if t.state is not TaskState.PENDING]
        result = ReapResult(requeued, failed)
        if result.reaped:
            log.info(
                "reaped expired leases", extra={"requeued": len(requeued), "failed": len(failed)}
            )
        return result

    async def _reap_batch(self) -> list[Task]:
        """One transaction: requeue (or fail, with attempts spent) a batch of
        tasks whose lease ran out, with their events and job outcomes."""
        now = self._clock.sql_now()
        async with transaction(self._db) as conn:
            reaped = await tasks.reap_expired_leases(
                conn,
                batch=self.settings.batch,
                backoff_seconds=self._policy.retry_backoff_seconds,
                max_backoff=self._policy.max_backoff_seconds,
                now=now,
            )
            changed: list[Job] = []
            for task in reaped:
                if task.state is TaskState.PENDING:
                    await jobs.insert_job_event(
                        conn,
                        task.job_id,
                        f"Lease of task {task.kind.value} expired: {runtime_name(task.runtime)} "
                        f"stopped heartbeating; requeued (attempt {task.attempt} of "
                        f"{task.max_attempts})",
                        now=now,
                        level=EventLevel.WARNING,
                    )
                else:
                    lost = replace(
                        task,
                        error_message=f"lease expired {task.max_attempts} times: "
                        f"{runtime_name(task.runtime)} stopped heartbeating; giving up",
                    )
                    changed += await self._outcomes.failed(conn, lost)
        for task in reaped:
            self._metrics.lease_expired(task)
        self._lifecycle.published(changed)
        return reaped
