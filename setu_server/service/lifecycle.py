"""Job transitions as the rest of the server makes them: through the one
store statement, then published to this process's watch hub at once."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from setu_client.clock import Clock
from setu_server.models import EventLevel, Job, JobState, Phase
from setu_server.service.watch import WatchHub
from setu_server.store import jobs
from setu_server.store.db import Database, Executor


class JobLifecycle:
    def __init__(self, pool: Database, hub: WatchHub, clock: Clock) -> None:
        self._pool = pool
        self._hub = hub
        self._clock = clock

    async def transition(
        self,
        job_id: UUID,
        to: JobState,
        message: str,
        *,
        db: Executor | None = None,
        level: EventLevel = EventLevel.INFO,
        error_message: str | None = None,
        phase: Phase | None = None,
        only_from: frozenset[JobState] | None = None,
        result: dict[str, Any] | None = None,
    ) -> Job:
        """Move one job. Pass `db` (a connection in a transaction) to make the
        move part of a larger one; then call `published` after commit."""
        job = await jobs.transition_job(
            db or self._pool,
            job_id,
            to,
            now=self._clock.sql_now(),
            message=message,
            level=level,
            error_message=error_message,
            phase=phase,
            only_from=only_from,
            result=result,
        )
        if db is None:
            self.published([job])
        return job

    async def transition_many(
        self,
        job_ids: list[UUID],
        to: JobState,
        message: str,
        *,
        db: Executor | None = None,
        level: EventLevel = EventLevel.INFO,
        error_message: str | None = None,
        result: dict[str, Any] | None = None,
    ) -> list[Job]:
        """Move every listed job that may go to `to`, in one statement; the
        others stay as they are. With `db`, as `transition`: the caller
        publishes after commit."""
        moved = await jobs.transition_jobs(
            db or self._pool,
            job_ids,
            to,
            now=self._clock.sql_now(),
            message=message,
            level=level,
            error_message=error_message,
            result=result,
        )
        if db is None:
            self.published(moved)
        return moved

    def published(self, changed: list[Job]) -> None:
        """Hand committed snapshots to local waiters; other processes hear the NOTIFY."""
        self._hub.publish(changed)
