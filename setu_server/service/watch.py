"""The watch hub: one Watch per job somebody waits on, in every server process.

A Watch holds the latest snapshot of its job and wakes its waiters when a
newer version arrives. Snapshots come from three places: transitions made in
this process (published at once), notifications from any process (the
listener calls `notified`; the hub re-reads those jobs in batches), and
re-reads of every watched job after the listener reconnects or on a slow
periodic re-check, so a lost notification cannot strand a waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from uuid import UUID

from setu_server.metrics import Metrics
from setu_server.models import Job

log = logging.getLogger(__name__)

Loader = Callable[[list[UUID]], Awaitable[list[Job]]]

# Jobs re-read per query when many notifications arrive at once.
READ_BATCH = 1000

# A wait this close to its deadline is over: loop clocks are not infinitely
# fine (a fast-forwarded one moves in microseconds), and a timer for 1e-14 s
# would fire without the clock moving, spinning forever.
CLOCK_SLACK = 1e-3


class Watch:
    def __init__(self, job_id: UUID) -> None:
        self.job_id = job_id
        self.latest: Job | None = None
        self.subscribers = 0
        self._changed = asyncio.Event()

    @property
    def version(self) -> int:
        return self.latest.version if self.latest else 0

    def offer(self, job: Job) -> None:
        """Take `job` if it is newer than what we hold, and wake the waiters."""
        if self.latest is None or job.version > self.latest.version:
            self.latest = job
            self.wake()

    def wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def newer_than(self, version: int, timeout: float | None, closing: asyncio.Event) -> Job:
        """The first snapshot newer than `version`, or the latest one when the
        timeout runs out or the hub closes."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self.version <= version and not closing.is_set():
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining < CLOCK_SLACK:
                break
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await changed.wait()
        assert self.latest is not None, "a watch is read before anyone waits on it"
        return self.latest


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

    # -- subscribers

    @contextlib.contextmanager
    def subscribe(self, job_id: UUID) -> Iterator[Watch]:
        watch = self._watches.get(job_id)
        if watch is None:
            watch = self._watches[job_id] = Watch(job_id)
        watch.subscribers += 1
        try:
            yield watch
        finally:
            watch.subscribers -= 1
            if watch.subscribers == 0:
                del self._watches[job_id]

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
        """A `setu_job` notification: {job_id, version, state}."""
        try:
            message = json.loads(payload)
            job_id, version = UUID(message["job_id"]), int(message["version"])
        except (ValueError, KeyError, TypeError):
            log.warning("malformed job notification", extra={"payload": payload[:200]})
            return
        watch = self._watches.get(job_id)
        if watch is not None and version > watch.version:
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
