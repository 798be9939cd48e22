"""The janitor: staged data is deleted once its run has been over for the
retention (SETU_STAGED_RETENTION_HOURS), so the blob store does not grow
without end. A run still going keeps its data: a retry resumes from it.

Safe on every replica at once: each run is locked (SKIP LOCKED), purged and
marked in its own transaction; a run whose delete fails stays unmarked and
the next pass tries it again.
"""

from __future__ import annotations

import asyncio
import logging
from uuid import UUID

from setu_agent.engine.blob import BlobStore
from setu_agent.engine.staging import is_run_prefix, run_prefix
from setu_client.clock import Clock
from setu_server.models import StagedRun
from setu_server.store import runs
from setu_server.store.db import Database, transaction

log = logging.getLogger(__name__)


def own_prefixes(run: StagedRun) -> set[str]:
    """The prefixes the janitor deletes: only the run's own, whatever an
    artifact row says, and the run's prefix itself when its pipeline is known
    (parts of an extract that never finished have no artifact row)."""
    found = {p for p in run.prefixes if is_run_prefix(p, run.workspace_id, run.id)}
    if run.pipeline_id is not None:
        found.add(run_prefix(run.workspace_id, run.pipeline_id, run.id))
    return found


BATCH = 50


class Janitor:
    def __init__(
        self,
        pool: Database,
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
        """Purges up to a batch of expired runs, each in its own short
        transaction (a slow or failing delete holds one run, not many);
        returns how many were purged."""
        purged = 0
        skipped: list[UUID] = []
        while purged + len(skipped) < BATCH:
            async with transaction(self._pool) as conn:
                due = await runs.runs_to_purge(
                    conn, self._clock.sql_now(), self._retention, 1, skipped
                )
                if not due:
                    break
                run = due[0]
                job_id = run.id
                try:
                    for prefix in sorted(own_prefixes(run)):
                        await self._blob.delete_prefix(prefix)
                except Exception:
                    log.exception("could not purge staged data", extra={"job_id": str(job_id)})
                    skipped.append(job_id)  # left for the next pass
                    continue
                await runs.mark_staged_purged(conn, [job_id], self._clock.sql_now())
                purged += 1
        if purged:
            log.info("staged data purged", extra={"runs": purged})
        return purged

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("janitor pass failed; trying again next interval")
            await asyncio.sleep(self._interval)
