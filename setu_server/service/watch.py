"""The watch hub: one Watch per job somebody waits on, in every server process.

A Watch holds the latest snapshot of its job and wakes its waiters when a
newer version arrives. Snapshots come from three places: transitions made in
this process (published at once), notifications from any process (the
listener calls `notified`), and re-checks of every watched job after the
listener reconnects or on a slow periodic re-check, so a lost notification
cannot strand a waiter. A re-check sends the versions the hub holds and gets
back only the rows that are newer (`changed_jobs`), so it costs what changed
behind the hub's back, not what is watched.

A notification carries the job's snapshot (setu_job_notice, migration 0007):
the hub applies it to the snapshot it holds and wakes the waiters with no
database round trip, so one commit that ends 50,000 watched jobs costs their
parsing, not 50 re-reads. Only a notification without a snapshot (one that
would have passed PostgreSQL's 8,000-byte payload limit), or one for a job
whose watch holds nothing yet, is re-read, in batches.

Nothing here does a storm's work in one turn of the event loop: every call on
the server waits for a turn to end. Notifications are queued as they arrive
and applied a chunk per turn; a newer snapshot is the watch's at once, but
its waiters are resolved a chunk per turn too, because each one woken runs
its handler's tail (the answer built and sent) in the next turn; `Drain`
sizes the chunks to the length of the loop's turns. See
"The watch hub" in docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any, Generic, TypeVar, cast
from uuid import UUID

from setu_server.metrics import Metrics
from setu_server.models import Job, JobState, Phase

log = logging.getLogger(__name__)

Loader = Callable[[list[UUID]], Awaitable[list[Job]]]
# Of the jobs `ids`, those newer than `versions` (held, in the same order; 0
# for none): setu_server/store/jobs.py `changed_jobs`.
Changed = Callable[[list[UUID], list[int]], Awaitable[list[Job]]]
T = TypeVar("T")

# Jobs re-read per query for notifications without a snapshot (every one of
# them comes back). The rows become Jobs in the one turn that resumes after
# the fetch: with 1,000 rows a query, that turn held the loop 60-110 ms at a
# time on a loaded machine (scripts/bench_park.py).
READ_BATCH = 200
# Jobs re-checked per query (after a reconnect, on the periodic re-check):
# only the changed ones come back, and the store converts those a slice per
# turn. Measured on 50,000 watched jobs, none changed (2-core machine, load
# 3): the store's query costs the loop 0.19 ms at 200 ids (48 ms for all),
# 0.7 ms at 1,000 (34 ms), 1.1 ms at 2,000 (28 ms); PostgreSQL about 2.5 us
# an id. A whole pass, hub included, took 50-190 ms of the loop's CPU (load
# 3-7); re-reading every row took 600-740 ms.
CHECK_BATCH = 1_000

# How long one turn of the event loop may take while a storm drains: every
# call on the server waits for the turn to end, and a 10 ms timer fires one
# to two turns late.
TURN_BUDGET = 0.010
# Waiters resolved per turn, at most and at least. A woken WaitJob finishes in
# the next turn (its answer built and sent through grpc: 150 us each on a
# quiet 2-core machine, 1 ms on a loaded one), so how many fit in a turn is
# measured as the storm drains rather than fixed (see `Drain`).
WAKE_CHUNK = 250
LEAST_CHUNK = 10
# Notifications applied per turn, at most (about 20 us each: the JSON, the
# snapshot, the offer; asyncpg hands over some 450 per 256 KiB read).
NOTICE_CHUNK = 250

# Answers held by `Answers`: the waiters of one version are answered within
# a few turns of each other, so a few dozen would do.
ANSWERS_HELD = 256

# The longest the collector stays off through one storm (`StormCollector`):
# a 20,000-job storm drains in 4-15 s on a loaded 2-core machine.
GC_HOLD_SECONDS = 30.0

# A wait this close to its deadline is over: loop clocks are not infinitely
# fine (a fast-forwarded one moves in microseconds), and a timer for 1e-14 s
# would fire without the clock moving, spinning forever.
CLOCK_SLACK = 1e-3


class StormCollector:
    """Keeps the cyclic collector out of a storm: off while any drain has a
    backlog (items left after its turn), on again once every drain has caught
    up, or after `GC_HOLD_SECONDS` whatever happens.

    Why: while a storm drains, answers free as much as the storm allocates,
    so the young generation's count stays under its threshold while the
    objects that live across a few turns (the applied snapshots, the calls
    being answered) pile up in it; when a collection does come it walks all
    of them, 115-140 ms of the loop's CPU in one pause
    (scripts/bench_park.py). With the collector held off they are freed by
    reference counting as the storm ends, and the next young collection
    walks what is left. Reference cycles made meanwhile wait for it.
    Process-wide, as the collector is; a collector someone else turned off
    stays off."""

    __slots__ = ("_holders", "_loop", "_since", "disabled")

    def __init__(self) -> None:
        self._holders: set[int] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._since = 0.0
        # True while this turned the collector off.
        self.disabled = False

    def hold(self, holder: object, now: float) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # drains of a loop that ended hold nothing
            self._holders.clear()
            self._loop = loop
        if not self._holders:
            self._since = now
            if gc.isenabled():
                gc.disable()
                self.disabled = True
        self._holders.add(id(holder))
        if self.disabled and now - self._since > GC_HOLD_SECONDS:
            self._enable()

    def release(self, holder: object) -> None:
        self._holders.discard(id(holder))
        if not self._holders:
            self._enable()

    def _enable(self) -> None:
        if self.disabled:
            self.disabled = False
            gc.enable()


STORM_GC = StormCollector()


class Drain(Generic[T]):
    """A queue handled a chunk per turn of the event loop.

    Items put in one turn are handled from the next, one chunk a turn, each
    chunk scheduled with `call_soon`, so timers, I/O and other calls run
    between chunks however many items a storm puts. The chunk follows the
    length of the loop's turns (the time between two of our turns is one
    whole turn, with all the items handled in the last one set off in it):
    as many items as that pace fits in `turn_budget`, at most twice as many
    as the last turn handled, between `least` and `most`. A loaded machine,
    where each woken call costs more, wakes fewer per turn instead of
    stalling longer. While items are left after a turn, the collector is
    held off (`StormCollector`)."""

    __slots__ = (
        "_handle",
        "_handled",
        "_items",
        "_last",
        "_scheduled",
        "budget",
        "chunk",
        "least",
        "most",
    )

    def __init__(
        self,
        handle: Callable[[T], None],
        most: int,
        *,
        least: int = LEAST_CHUNK,
        turn_budget: float = TURN_BUDGET,
    ) -> None:
        self._handle = handle
        self._items: deque[T] = deque()
        self._scheduled = False
        self._last: float | None = None
        self._handled = 0
        self.most = most
        self.least = min(least, most)
        self.chunk = self.least
        self.budget = turn_budget

    def __len__(self) -> int:
        return len(self._items)

    def append(self, item: T) -> None:
        self._items.append(item)
        self._schedule()

    def extend(self, items: Iterable[T]) -> None:
        self._items.extend(items)
        self._schedule()

    def _schedule(self) -> None:
        if self._items and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        loop = asyncio.get_running_loop()
        self._fit(loop.time())
        items, handle = self._items, self._handle
        self._handled = min(self.chunk, len(items))
        for _ in range(self._handled):
            try:
                handle(items.popleft())
            except Exception:
                log.exception("watch hub: handling a queued item failed")
        if items:
            STORM_GC.hold(self, loop.time())
            loop.call_soon(self._turn)
        else:
            STORM_GC.release(self)
            self._scheduled = False
            self._last = None

    def _fit(self, now: float) -> None:
        """The chunk for this turn, from how long the last whole turn took
        with the items it handled."""
        if self._last is not None:
            took, handled = now - self._last, max(self._handled, 1)
            fits = handled * 2 if took <= 0 else round(handled * self.budget / took)
            self.chunk = max(self.least, min(self.most, handled * 2, fits))
        self._last = now


class Watch:
    """One watched job: its latest snapshot and the waiters parked on it.

    Also the context manager `WatchHub.subscribe` hands out: entering counts
    a subscriber, leaving the last one drops the watch from its hub. Slots,
    one future per parked waiter and one timer for its deadline: a parked
    wait holds little more than grpc's own call (scripts/bench_park.py)."""

    __slots__ = ("_hub", "_named", "_waiters", "job_id", "latest", "subscribers")

    def __init__(self, job_id: UUID, hub: WatchHub) -> None:
        self.job_id = job_id
        self.latest: Job | None = None
        self.subscribers = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._hub = hub
        # The latest snapshot as answers show it (`named`), once a waiter
        # has been answered with it; None while waiters park.
        self._named: Job | None = None

    def __enter__(self) -> Watch:
        self.subscribers += 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.subscribers -= 1
        watches = self._hub._watches
        if self.subscribers == 0 and watches.get(self.job_id) is self:
            del watches[self.job_id]

    @property
    def version(self) -> int:
        return self.latest.version if self.latest else 0

    def offer(self, job: Job) -> None:
        """Take `job` if it is newer than what we hold, and wake the waiters."""
        if self.latest is None or job.version > self.latest.version:
            self.latest = job
            self._named = None
            self.wake()

    def named(self, version: int) -> Job | None:
        """The snapshot of `version` as an earlier waiter was answered with
        it (`keep_named`), if that is still the one held."""
        named = self._named
        return named if named is not None and named.version == version else None

    def keep_named(self, named: Job) -> Job:
        """Keep `named` for the other waiters answered with its version: they
        are woken together, so every one gets this same object, and so the
        same answer (JobService.answer). Kept only while nobody parks, so a
        parked watch holds one snapshot, not two."""
        self._hub.named += 1
        if named.version == self.version:
            self._named = named
        return named

    def wake(self) -> None:
        """Hand the waiters to the hub, which resolves them a chunk a turn
        (a waiter that times out or is cancelled meanwhile is skipped)."""
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            self._hub.wakes.extend(waiters)

    async def newer_than(self, version: int, timeout: float | None, closing: asyncio.Event) -> Job:
        """The first snapshot newer than `version`, or the latest one when the
        timeout runs out or the hub closes."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self.version <= version and not closing.is_set():
            if deadline is not None and deadline - loop.time() < CLOCK_SLACK:
                break
            waiter: asyncio.Future[None] = loop.create_future()
            self._named = None
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


class Answers:
    """What answers built from a job snapshot, once for every waiter handed
    that same snapshot object: the waiters of one version are woken
    together and get one named Job (`Watch.keep_named`), so a storm builds
    one response per version, not one per waiter. The answer must not be
    changed once built (grpc.aio only serializes what a handler returns, so
    one message can answer many calls).

    Recent snapshots only (`size`), by identity (each entry holds its
    snapshot, so the id cannot be reused meanwhile): a version's waiters are
    answered one after another, in the same turns."""

    __slots__ = ("_held", "built", "size")

    def __init__(self, size: int = ANSWERS_HELD) -> None:
        self._held: dict[tuple[int, object], tuple[Job, object]] = {}
        self.size = size
        # Answers built (tests, observability).
        self.built = 0

    def of(self, job: Job, build: Callable[[Job], T]) -> T:
        key = (id(job), build)
        held = self._held.get(key)
        if held is not None and held[0] is job:
            return cast(T, held[1])
        answer = build(job)
        self.built += 1
        if len(self._held) >= self.size:
            del self._held[next(iter(self._held))]  # the oldest
        self._held[key] = (job, answer)
        return answer


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class WatchHub:
    def __init__(
        self,
        loader: Loader,
        *,
        changed: Changed | None = None,
        recheck_interval: float = 30.0,
        metrics: Metrics | None = None,
        wake_chunk: int = WAKE_CHUNK,
        notice_chunk: int = NOTICE_CHUNK,
    ) -> None:
        self._load = loader
        self._changed = changed or self._newer_of_load
        self._metrics = metrics or Metrics(process=False)
        self._watches: dict[UUID, Watch] = {}
        self.wakes: Drain[asyncio.Future[None]] = Drain(_resolve, wake_chunk)
        self._notices: Drain[str] = Drain(self._apply, notice_chunk)
        self._stale: set[UUID] = set()
        self._reader: asyncio.Task[None] | None = None
        self._recheck_interval = recheck_interval
        self._rechecker: asyncio.Task[None] | None = None
        self.closing = asyncio.Event()
        # Observability (and tests): jobs checked against the database, rows
        # that came back newer (each one made a Job), re-check passes, and
        # notifications applied from their snapshot alone.
        self.reads = 0
        self.fetched = 0
        self.rechecks = 0
        self.applied = 0
        # Snapshots named for an answer (once per version and watch, however
        # many of its waiters are answered with it).
        self.named = 0

    # -- subscribers

    def subscribe(self, job_id: UUID) -> Watch:
        """`with hub.subscribe(job_id) as watch:` watches the job while inside."""
        watch = self._watches.get(job_id)
        if watch is None:
            watch = self._watches[job_id] = Watch(job_id, self)
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
        """A `setu_job` notification: {job_id, version, state, snapshot?},
        applied in a later turn with the others queued (O(1) here: the
        listener calls this once per notification, hundreds per read)."""
        self._notices.append(payload)

    def _apply(self, payload: str) -> None:
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
        """Re-check every watched job (after a reconnect; on the periodic
        re-check), `CHECK_BATCH` per query: only the jobs newer than what the
        hub holds come back. Each query's wait frees the loop."""
        watched = list(self._watches)  # no hashing: 50,000 ids in well under a ms
        for start in range(0, len(watched), CHECK_BATCH):
            if not await self._read(watched[start : start + CHECK_BATCH]):
                return

    def _ensure_reader(self) -> None:
        if self._stale and (self._reader is None or self._reader.done()):
            self._reader = asyncio.create_task(self._read_stale(), name="setu-watch-reader")

    async def _read_stale(self) -> None:
        while self._stale:
            batch = [self._stale.pop() for _ in range(min(READ_BATCH, len(self._stale)))]
            if not await self._read(batch):
                return

    async def _read(self, batch: list[UUID]) -> bool:
        """Read the jobs of `batch` still watched that are newer than the
        snapshot held (the whole row where none is); False if the read failed."""
        watches = self._watches  # one lookup an id: a UUID hashes in Python
        held = [w for job_id in batch if (w := watches.get(job_id)) is not None]
        if not held:
            return True
        try:
            jobs = await self._changed([w.job_id for w in held], [w.version for w in held])
        except Exception:
            log.exception("watch re-read failed; the periodic re-check will retry")
            return False
        self.reads += len(held)
        self.fetched += len(jobs)
        self.publish(jobs)
        return True

    async def _newer_of_load(self, ids: list[UUID], versions: list[int]) -> list[Job]:
        """`changed` for a hub given only a loader (tests, benchmarks): the
        whole rows, filtered here."""
        held = dict(zip(ids, versions, strict=True))
        return [job for job in await self._load(ids) if job.version > held[job.id]]

    # -- lifecycle

    async def run_once(self) -> None:
        """The slow safety net: re-check every watched job."""
        self._metrics.rechecked()
        await self.refresh_all()
        self.rechecks += 1

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
        """Answer every parked waiter with what it has (without waiting for
        anything newer; still a chunk a turn); stop the loops."""
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
    return _replaced(
        job,
        version=version,
        state=JobState(state),
        phase=Phase(phase) if phase else None,
        cancel_requested=bool(snapshot["cancel_requested"]),
        error_message=str(snapshot["error_message"]),
        rows_extracted=int(snapshot["rows_extracted"]),
        rows_loaded=int(snapshot["rows_loaded"]),
        rows_total=int(snapshot["rows_total"]),
        rows_filtered=int(snapshot.get("rows_filtered", 0)),
        rows_inserted=int(snapshot.get("rows_inserted", 0)),
        rows_updated=int(snapshot.get("rows_updated", 0)),
        rows_unchanged=int(snapshot.get("rows_unchanged", 0)),
        rows_deleted=int(snapshot.get("rows_deleted", 0)),
        extract_runtime=str(snapshot["extract_runtime"]),
        load_runtime=str(snapshot["load_runtime"]),
        result=snapshot["result"],
        updated_at=_time(snapshot["updated_at"]) or job.updated_at,
        started_at=_time(snapshot["started_at"]),
        finished_at=_time(snapshot["finished_at"]),
    )


def _replaced(job: Job, **changes: Any) -> Job:
    """`dataclasses.replace(job, **changes)` for the storm's path: a Job has
    no __post_init__ and no init-only fields, so a copy of its fields with
    `changes` over them is the same Job. `replace` goes through the
    generated __init__ (40 fields, each set with object.__setattr__, the
    class being frozen): 75 us a snapshot on a loaded 2-core machine against
    8 us, and a storm applies one per job (scripts/bench_park.py)."""
    new = object.__new__(Job)
    fields = new.__dict__
    fields.update(job.__dict__)
    fields.update(changes)
    return new


def _time(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None
