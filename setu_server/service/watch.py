"""The watch hub: one Watch per job somebody waits on, in every server process.

A Watch holds the latest snapshot of its job and wakes its waiters when a
newer version arrives. Snapshots come from three places: transitions made in
this process (published at once), notifications from any process (the
listener calls `notified`), and re-reads of every watched job after the
listener reconnects or on a slow periodic re-check, so a lost notification
cannot strand a waiter.

A notification carries the job's snapshot (setu_job_notice, migration 0007):
the hub applies it to the snapshot it holds and wakes the waiters with no
database round trip, so one commit that ends 50,000 watched jobs costs their
parsing, not 50 re-reads. Only a notification without a snapshot (one that
would have passed PostgreSQL's 8,000-byte payload limit), or one for a job
whose watch holds nothing yet, is re-read, in batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from setu_server.metrics import Metrics
from setu_server.models import Job, JobState, Phase

log = logging.getLogger(__name__)

Loader = Callable[[list[UUID]], Awaitable[list[Job]]]

# Jobs re-read per query when many notifications arrive at once.
READ_BATCH = 1000

# A wait this close to its deadline is over: loop clocks are not infinitely
# fine (a fast-forwarded one moves in microseconds), and a timer for 1e-14 s
# would fire without the clock moving, spinning forever.
CLOCK_SLACK = 1e-3


class Watch:
    """One watched job: its latest snapshot and the waiters parked on it.

    Also the context manager `WatchHub.subscribe` hands out: entering counts
    a subscriber, leaving the last one drops the watch from its hub. Slots,
    one future per parked waiter and one timer for its deadline: a parked
    wait holds little more than grpc's own call (scripts/bench_park.py)."""

    __slots__ = ("_waiters", "_watches", "job_id", "latest", "subscribers")

    def __init__(self, job_id: UUID, watches: dict[UUID, Watch] | None = None) -> None:
        self.job_id = job_id
        self.latest: Job | None = None
        self.subscribers = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._watches = watches

    def __enter__(self) -> Watch:
        self.subscribers += 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.subscribers -= 1
        watches = self._watches
        if self.subscribers == 0 and watches is not None and watches.get(self.job_id) is self:
            del watches[self.job_id]

    @property
    def version(self) -> int:
        return self.latest.version if self.latest else 0

    def offer(self, job: Job) -> None:
        """Take `job` if it is newer than what we hold, and wake the waiters."""
        if self.latest is None or job.version > self.latest.version:
            self.latest = job
            self.wake()

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _resolve(waiter)

    async def newer_than(self, version: int, timeout: float | None, closing: asyncio.Event) -> Job:
        """The first snapshot newer than `version`, or the latest one when the
        timeout runs out or the hub closes."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self.version <= version and not closing.is_set():
            if deadline is not None and deadline - loop.time() < CLOCK_SLACK:
                break
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            timer = None if deadline is None else loop.call_at(deadline, _resolve, waiter)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
                if waiter in self._waiters:  # still there unless wake() took it
                    self._waiters.remove(waiter)
        assert self.latest is not None, "a watch is read before anyone waits on it"
        return self.latest


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class WatchHub:
    def __init__(
        self, loader: Loader, *, recheck_interval: float = 30.0, metrics: Metrics | None = None
    ) -> None:
        self._load = loader
        self._metrics = metrics or Metrics(process=False)
        self._watches: dict[UUID, Watch] = {}
        self._stale: set[UUID] = set()
        self._reader: asyncio.Task[None] | None = None
        self._recheck_interval = recheck_interval
        self._rechecker: asyncio.Task[None] | None = None
        self.closing = asyncio.Event()
        # Observability (and tests): jobs re-read from the database, and
        # notifications applied from their snapshot alone.
        self.reads = 0
        self.applied = 0

    # -- subscribers

    def subscribe(self, job_id: UUID) -> Watch:
        """`with hub.subscribe(job_id) as watch:` watches the job while inside."""
        watch = self._watches.get(job_id)
        if watch is None:
            watch = self._watches[job_id] = Watch(job_id, self._watches)
        return watch

    @property
    def watched(self) -> int:
        return len(self._watches)

    # -- feeds

    def publish(self, jobs: list[Job]) -> None:
        """Snapshots from transitions made in this process."""
        for job in jobs:
            watch = self._watches.get(job.id)
            if watch is not None:
                watch.offer(job)

    def notified(self, payload: str) -> None:
        """A `setu_job` notification: {job_id, version, state, snapshot?}."""
        try:
            message = json.loads(payload)
            job_id, version = UUID(message["job_id"]), int(message["version"])
        except (ValueError, KeyError, TypeError):
            log.warning("malformed job notification", extra={"payload": payload[:200]})
            return
        watch = self._watches.get(job_id)
        if watch is None or version <= watch.version:
            return
        snapshot = message.get("snapshot")
        if watch.latest is not None and isinstance(snapshot, dict):
            try:
                job = _applied(watch.latest, version, message["state"], snapshot)
            except (ValueError, KeyError, TypeError):
                log.warning("malformed job snapshot", extra={"payload": payload[:200]})
            else:
                self.applied += 1
                watch.offer(job)
                return
        self._stale.add(job_id)
        self._ensure_reader()

    async def refresh_all(self) -> None:
        """Re-read every watched job (after a reconnect; on the periodic re-check)."""
        self._stale.update(self._watches)
        self._ensure_reader()
        if self._reader is not None:
            await asyncio.shield(self._reader)

    def _ensure_reader(self) -> None:
        if self._stale and (self._reader is None or self._reader.done()):
            self._reader = asyncio.create_task(self._read_stale(), name="setu-watch-reader")

    async def _read_stale(self) -> None:
        while self._stale:
            batch = [self._stale.pop() for _ in range(min(READ_BATCH, len(self._stale)))]
            batch = [job_id for job_id in batch if job_id in self._watches]
            if not batch:
                continue
            try:
                jobs = await self._load(batch)
            except Exception:
                log.exception("watch re-read failed; the periodic re-check will retry")
                return
            self.reads += len(batch)
            self.publish(jobs)

    # -- lifecycle

    async def run_once(self) -> None:
        """The slow safety net: re-read every watched job."""
        self._metrics.rechecked()
        await self.refresh_all()

    def start(self) -> None:
        self._rechecker = asyncio.create_task(self._recheck_loop(), name="setu-watch-recheck")

    async def _recheck_loop(self) -> None:
        while True:
            await asyncio.sleep(self._recheck_interval)
            try:
                await self.run_once()
            except Exception:
                log.exception("watch re-check failed")

    async def close(self) -> None:
        """Answer every parked waiter at once with what it has; stop the loops."""
        self.closing.set()
        for watch in self._watches.values():
            watch.wake()
        for task in (self._rechecker, self._reader):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def _applied(job: Job, version: int, state: str, snapshot: dict[str, Any]) -> Job:
    """`job` as a notification's snapshot says it is now (what a transition
    or a progress write may change; the rest of a job never changes)."""
    phase = snapshot["phase"]
    return dataclasses.replace(
        job,
        version=version,
        state=JobState(state),
        phase=Phase(phase) if phase else None,
        cancel_requested=bool(snapshot["cancel_requested"]),
        error_message=str(snapshot["error_message"]),
        rows_extracted=int(snapshot["rows_extracted"]),
        rows_loaded=int(snapshot["rows_loaded"]),
        rows_total=int(snapshot["rows_total"]),
        extract_runtime=str(snapshot["extract_runtime"]),
        load_runtime=str(snapshot["load_runtime"]),
        result=snapshot["result"],
        updated_at=_time(snapshot["updated_at"]) or job.updated_at,
        started_at=_time(snapshot["started_at"]),
        finished_at=_time(snapshot["finished_at"]),
    )


def _time(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None
