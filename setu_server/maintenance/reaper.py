"""The reaper: leases that ran out go back to their queue, or fail their job
when attempts are spent. Safe on every replica at once (SKIP LOCKED)."""

from __future__ import annotations

import asyncio
import logging

from setu_server.service.tasks import TaskService

log = logging.getLogger(__name__)


class Reaper:
    def __init__(self, tasks: TaskService, interval_seconds: float = 5.0) -> None:
        self._tasks = tasks
        self._interval = interval_seconds

    async def run_once(self) -> int:
        """Reap until no expired lease is left; returns how many were reaped."""
        total = 0
        while reaped := await self._tasks.reap():
            total += reaped
        if total:
            log.info("reaped expired leases", extra={"tasks": total})
        return total

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("reaper pass failed; trying again next interval")
            await asyncio.sleep(self._interval)
