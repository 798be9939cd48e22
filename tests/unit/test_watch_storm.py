"""A storm (one commit ending thousands of watched jobs) is handled a chunk per
turn of the event loop: between chunks the loop runs everything else, so no
call on the server waits for the whole storm. Every waiter still gets its
own job's snapshot."""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import replace
from datetime import UTC, datetime

from setu_server.models import Job, JobState
from setu_server.service.watch import Drain, WatchHub
from tests.factories import detached_job, no_jobs

NOW = datetime(2026, 1, 1, tzinfo=UTC)
STORM = 10_000
CHUNK = 1_000


def _notice(job: Job) -> str:
    """A `setu_job` payload as setu_job_notice (migration 0007) writes it."""
    snapshot = {
        "phase": None,
        "cancel_requested": False,
        "error_message": job.error_message,
        "rows_extracted": 0,
        "rows_loaded": 0,
        "rows_total": 0,
        "extract_runtime": "",
        "load_runtime": "",
        "result": None,
        "updated_at": NOW.isoformat(),
        "started_at": None,
        "finished_at": NOW.isoformat(),
    }
    return json.dumps(
        {
            "job_id": str(job.id),
            "version": job.version,
            "state": job.state.value,
            "snapshot": snapshot,
        }
    )


class Turns:
    """A task that notes each turn of the loop it gets, in one log with the
    wakes: `log` reads like "turn, woke, woke, turn, woke, ..."."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self._task: asyncio.Task[None] | None = None

    def __enter__(self) -> Turns:
        self._task = asyncio.create_task(self._tick())
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._task is not None
        self._task.cancel()

    async def _tick(self) -> None:
        while True:
            self.log.append("turn")
            await asyncio.sleep(0)

    def longest_run(self, entry: str) -> int:
        """The most `entry`s logged with no turn of the ticker between them."""
        longest = run = 0
        for logged in self.log:
            run = run + 1 if logged == entry else 0
            longest = max(longest, run)
        return longest


async def _parked(hub: WatchHub, jobs: list[Job]) -> None:
    """Lets the waiters run until each job's watch holds one parked waiter."""
    for _ in range(100):
        if all(len(hub.subscribe(j.id)._waiters) == 1 for j in jobs):
            return
        await asyncio.sleep(0)
    raise AssertionError("the waiters did not park")


async def test_a_storm_of_wakes_yields_to_the_loop_between_chunks() -> None:
    hub = WatchHub(no_jobs, wake_chunk=CHUNK)
    jobs = [detached_job() for _ in range(STORM)]
    ended = [replace(j, state=JobState.SUCCEEDED, version=2) for j in jobs]
    watches = [hub.subscribe(j.id).__enter__() for j in jobs]
    for watch, job in zip(watches, jobs, strict=True):
        watch.offer(job)

    with Turns() as turns:

        async def wait(watch_index: int) -> Job:
            answer = await watches[watch_index].newer_than(1, 60, hub.closing)
            turns.log.append("woke")
            return answer

        waiters = [asyncio.create_task(wait(i)) for i in range(STORM)]
        await _parked(hub, jobs)
        hub.publish(ended)
        answers = await asyncio.gather(*waiters)

    assert answers == ended, "every waiter answered with its own job's snapshot"
    assert turns.longest_run("woke") <= CHUNK, "the loop got a turn between chunks"
    for watch in watches:
        watch.__exit__(None, None, None)
    assert hub.watched == 0


async def test_a_storm_of_notifications_is_applied_a_chunk_per_turn() -> None:
    hub = WatchHub(no_jobs, notice_chunk=CHUNK)
    jobs = [detached_job() for _ in range(STORM)]
    watches = [hub.subscribe(j.id).__enter__() for j in jobs]
    for watch, job in zip(watches, jobs, strict=True):
        watch.offer(job)
    ended = [
        replace(j, state=JobState.FAILED, version=2, error_message=f"no {i}")
        for i, j in enumerate(jobs)
    ]
    applied: list[int] = []

    async def count_per_turn() -> None:
        while hub.applied < STORM:
            applied.append(hub.applied)
            await asyncio.sleep(0)

    counting = asyncio.create_task(count_per_turn())
    for job in ended:
        hub.notified(_notice(job))
    assert hub.applied == 0, "the listener's callback only queues the notification"
    await counting

    steps = [after - before for before, after in itertools.pairwise(applied)]
    assert max(steps) <= CHUNK, "at most one chunk applied per turn"
    assert hub.reads == 0, "applied from the snapshots, no read"
    assert [w.latest for w in watches] == [
        replace(j, updated_at=NOW, finished_at=NOW) for j in ended
    ]
    for watch in watches:
        watch.__exit__(None, None, None)


def test_the_chunk_follows_the_pace_of_the_loops_turns() -> None:
    """A turn of 40 ms that handled 400 items against a 10 ms budget: 100
    fit. Short turns let the chunk grow back, at most twice what the last
    turn handled; it stays within bounds."""
    drain: Drain[int] = Drain(lambda _: None, 1000, least=10, turn_budget=0.010)

    def turn(now: float, handled: int) -> int:
        drain._fit(now)
        drain._handled = handled
        return drain.chunk

    assert turn(100.0, 400) == 10, "the first turn of a storm: nothing measured yet"
    assert turn(100.040, 100) == 100
    assert turn(100.041, 30) == 200, "grows by doubling at most"
    assert turn(100.042, 10) == 60, "from what the last turn handled, not its chunk"
    for now in (101.0, 102.0, 103.0):
        turn(now, 10)
    assert drain.chunk == 10, "never below the least"
    for i in range(20):
        turn(103.0 + (i + 1) * 1e-6, drain.chunk)
    assert drain.chunk == 1000, "never above the most"
