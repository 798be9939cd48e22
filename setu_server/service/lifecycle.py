"""Job transitions as the rest of the server makes them: through the one
store statement, then published to this process's watch hub at once.

Transitions are counted (metrics) here, once they are committed: at once
when made on the pool, or when the caller in charge of the transaction
publishes them after its commit. A rolled-back transition is never
published, so never counted; a replica that only hears the NOTIFY counts
nothing."""

from __future__ import annotations

import weakref
from typing import Any
from uuid import UUID

from setu_client.clock import Clock
from setu_server.metrics import Metrics
from setu_server.models import EventLevel, Job, JobState, Phase
from setu_server.service.watch import WatchHub
from setu_server.store import jobs
from setu_server.store.db import Database, Executor


class JobLifecycle:
    def __init__(
        self, pool: Database, hub: WatchHub, clock: Clock, metrics: Metrics | None = None
    ) -> None:
        self._pool = pool
        self._hub = hub
        self._clock = clock
        self._metrics = metrics or Metrics(clock, process=False)
        # Transitions made in callers' transactions, not yet published. By
        # identity: the very snapshots transition() returned, so the one the
        # caller publishes after commit is counted, and a phase or progress
        # snapshot of the same job is not. Weakly: a snapshot its caller
        # dropped (rolled back, or never published) leaves on its own.
        self._unpublished: weakref.WeakValueDictionary[int, Job] = weakref.WeakValueDictionary()

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
            error_message=_cleared(to, error_message),
            phase=phase,
            only_from=only_from,
            result=result,
        )
        if db is None:
            self.moved([job])
        else:
            self._hold([job])
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
            error_message=_cleared(to, error_message),
            result=result,
        )
        if db is None:
            self.moved(moved)
        else:
            self._hold(moved)
        return moved

    def published(self, changed: list[Job]) -> None:
        """Hand committed snapshots to local waiters; other processes hear the
        NOTIFY. Those that transition() made in the committed transaction
        are counted."""
        for job in changed:
            if self._unpublished.pop(id(job), None) is job:
                self._metrics.job_moved(job)
        self._hub.publish(changed)

    def moved(self, jobs: list[Job]) -> None:
        """Jobs that a committed statement moved (a lease that starts a run,
        a completion that ends one): counted, then published."""
        for job in jobs:
            self._metrics.job_moved(job)
        self._hub.publish(jobs)

    @property
    def unpublished(self) -> int:
        """Transitions made in transactions whose callers still hold them."""
        return len(self._unpublished)

    def _hold(self, jobs: list[Job]) -> None:
        for job in jobs:
            self._unpublished[id(job)] = job


def _cleared(to: JobState, error_message: str | None) -> str | None:
    """A job that succeeded carries no error: a cancel that came after its
    load committed (too late to stop it) leaves its reason behind otherwise."""
    return "" if to is JobState.SUCCEEDED else error_message
