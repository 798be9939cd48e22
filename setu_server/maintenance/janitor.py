"""The janitor: staged data is deleted once its run has been over for the
retention (SETU_STAGED_RETENTION_HOURS), so the blob store does not grow
without end. A run still going keeps its data: a retry resumes from it.

Safe on every replica at once: a pass locks the runs it purges (SKIP
LOCKED) and marks them in the same transaction; a blob delete that fails
rolls the mark back, and the next pass tries again.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from setu_agent.engine.blob import BlobStore
from setu_client.clock import Clock
from setu_server.store import runs
from setu_server.store.db import transaction

log = logging.getLogger(__name__)

BATCH = 50


class Janitor:
    def __init__(
        self,
        pool: asyncpg.Pool,
        clock: Clock,
        blob: BlobStore,
        retention_seconds: float,
        interval: float = 60.0,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._blob = blob
        self._retention = retention_seconds
        self._interval = interval

    async def run_once(self) -> int:
        """Purges one batch of expired runs; returns how many."""
        now = self._clock.sql_now()
        async with transaction(self._pool) as conn:
            due = await runs.runs_to_purge(conn, now, self._retention, BATCH)
            deleted = 0
            for _, prefixes in due:
                for prefix in sorted(prefixes):
                    deleted += await self._blob.delete_prefix(prefix)
            await runs.mark_staged_purged(conn, [job_id for job_id, _ in due], now)
        if due:
            log.info("staged data purged", extra={"runs": len(due), "objects": deleted})
        return len(due)

    async def run(self) -> None:
        while True:
            try:
                while await self.run_once() == BATCH:
                    pass
            except Exception:
                log.exception("janitor pass failed; trying again next interval")
            await asyncio.sleep(self._interval)
