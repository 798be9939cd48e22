"""The scheduler: a pipeline with a cron schedule gets a run per tick,
through the same path as a manual run (RunService).

Safe on every replica at once: a pass locks the due pipelines (SKIP
LOCKED), creates each one's run and moves its next tick in one
transaction, so exactly one replica fires a tick; the unique
(pipeline_id, scheduled_for) of a run is the backstop. Ticks missed while
no server ran collapse into one run, for the oldest of them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from uuid import UUID

from setu_client.clock import Clock
from setu_client.errors import AlreadyExists
from setu_server.config import SchedulerSettings
from setu_server.maintenance.periodic import PeriodicService
from setu_server.models import Job
from setu_server.service.pipelines import next_tick
from setu_server.service.runs import RunService
from setu_server.store import runs
from setu_server.store.db import Database, transaction

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScheduleResult:
    # The runs this pass created (a tick that cannot run is a failed run).
    created: list[UUID] = field(default_factory=list)
    # Due pipelines whose tick already had its run (another replica's).
    already_fired: list[UUID] = field(default_factory=list)


class Scheduler(PeriodicService[ScheduleResult]):
    name = "scheduler"

    def __init__(
        self,
        db: Database,
        clock: Clock,
        runs_service: RunService,
        settings: SchedulerSettings | None = None,
    ) -> None:
        self.settings = settings or SchedulerSettings()
        super().__init__(self.settings.interval_seconds)
        self._db = db
        self._clock = clock
        self._runs = runs_service

    async def run_once(self) -> ScheduleResult:
        """Fires every due tick."""
        created: list[UUID] = []
        already: list[UUID] = []
        made: list[Job] = []
        async with transaction(self._db) as conn:
            due = await runs.due_pipelines(conn, self._clock.sql_now(), self.settings.batch)
            for pipeline_id, workspace_id, schedule, tick in due:
                pipeline = await runs.pipeline_for_run(conn, pipeline_id, workspace_id)
                assert pipeline is not None, "a due pipeline is locked, so it still exists"
                try:
                    async with conn.transaction():
                        job = await self._runs.submit_scheduled(conn, pipeline, tick)
                    created.append(job.id)
                    made.append(job)
                except AlreadyExists:
                    already.append(pipeline_id)  # this tick already has its run
                later = next_tick(schedule, max(tick, self._clock.now()))
                await runs.set_next_run(conn, pipeline_id, later)
        self._runs.published(made)
        if created:
            log.info("scheduled runs created", extra={"runs": len(created)})
        return ScheduleResult(created, already)
