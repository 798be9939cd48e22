"""The janitor: staged data is deleted once its run has been over for the
retention (SETU_STAGED_RETENTION_HOURS), so the blob store does not grow
without end. A run still going keeps its data: a retry resumes from it.

Safe on every replica at once: each run is locked (SKIP LOCKED), purged and
marked in its own transaction; a run whose delete fails stays unmarked and
the next pass tries it again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from uuid import UUID

from setu_client.clock import Clock
from setu_engine.staged.blob import BlobStore
from setu_engine.staged.staging import is_run_prefix, run_prefix
from setu_server.config import JanitorSettings
from setu_server.maintenance.periodic import PeriodicService
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


@dataclass(frozen=True)
class JanitorResult:
    purged: list[UUID] = field(default_factory=list)
    # Runs whose delete failed this pass; the next pass tries them again.
    skipped: list[UUID] = field(default_factory=list)


class Janitor(PeriodicService[JanitorResult]):
    name = "janitor"

    def __init__(
        self,
        db: Database,
        clock: Clock,
        blob: BlobStore,
        settings: JanitorSettings | None = None,
    ) -> None:
        self.settings = settings or JanitorSettings()
        super().__init__(self.settings.interval_seconds)
        self._db = db
        self._clock = clock
        self._blob = blob

    async def run_once(self) -> JanitorResult:
        """Purges up to a batch of expired runs, each in its own short
        transaction (a slow or failing delete holds one run, not many)."""
        purged: list[UUID] = []
        skipped: list[UUID] = []
        while len(purged) + len(skipped) < self.settings.batch:
            async with transaction(self._db) as conn:
                due = await runs.runs_to_purge(
                    conn, self._clock.sql_now(), self.settings.retention_seconds, 1, skipped
                )
                if not due:
                    break
                run = due[0]
                try:
                    for prefix in sorted(own_prefixes(run)):
                        await self._blob.delete_prefix(prefix)
                except Exception:
                    log.exception("could not purge staged data", extra={"job_id": str(run.id)})
                    skipped.append(run.id)  # left for the next pass
                    continue
                await runs.mark_staged_purged(conn, [run.id], self._clock.sql_now())
                purged.append(run.id)
        if purged:
            log.info("staged data purged", extra={"runs": len(purged)})
        return JanitorResult(purged, skipped)
