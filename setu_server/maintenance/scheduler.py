"""The scheduler: a pipeline with a cron schedule gets a run per tick,
through the same path as a manual run (RunService).

Safe on every replica at once: a pass locks the due pipelines (SKIP
LOCKED), creates each one's run and moves its next tick in one
transaction, so exactly one replica fires a tick; the unique
(pipeline_id, scheduled_for) of a run is the backstop. Ticks missed while
no server ran collapse into one run, for the oldest of them.
"""

from __future__ import annotations

import asyncio
import logging

from setu_client.clock import Clock
from setu_client.errors import AlreadyExists
from setu_server.service.pipelines import next_tick
from setu_server.service.runs import RunService
from setu_server.store import runs
from setu_server.store.db import Database, transaction

log = logging.getLogger(__name__)

BATCH = 100


class Scheduler:
    def __init__(
        self, pool: Database, clock: Clock, runs_service: RunService, interval: float = 1.0
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._runs = runs_service
        self._interval = interval

    async def run_once(self) -> int:
        """Fires every due tick; returns the runs created."""
        created = 0
        async with transaction(self._pool) as conn:
            due = await runs.due_pipelines(conn, self._clock.sql_now(), BATCH)
            for pipeline_id, workspace_id, schedule, tick in due:
                pipeline = await runs.pipeline_for_run(conn, pipeline_id, workspace_id)
                assert pipeline is not None, "a due pipeline is locked, so it still exists"
                try:
                    async with conn.transaction():
                        await self._runs.submit_scheduled(conn, pipeline, tick)
                    created += 1
                except AlreadyExists:
                    pass  # this tick already has its run
                later = next_tick(schedule, max(tick, self._clock.now()))
                await runs.set_next_run(conn, pipeline_id, later)
        if created:
            log.info("scheduled runs created", extra={"runs": created})
        return created

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("scheduler pass failed; trying again next interval")
            await asyncio.sleep(self._interval)
