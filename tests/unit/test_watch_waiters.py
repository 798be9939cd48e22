"""A parked wait holds one future and one timer in its watch, and leaves
nothing behind however it ends: woken, timed out, cancelled. (50,000 parked
waits are what a server holds; a leak per wait would be the next outage.)"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from setu_server.service.watch import Watch, WatchHub
from tests.factories import detached_job, no_jobs


def _parked(watch: Watch) -> int:
    return len(watch._waiters)


async def _until_parked(watch: Watch, n: int) -> None:
    """Lets the waiters run until `n` are parked (a few loop turns)."""
    for _ in range(1000):
        if _parked(watch) >= n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{_parked(watch)} waiters parked, not {n}")


async def test_waiters_woken_by_a_newer_snapshot_leaveno_jobs_behind() -> None:
    hub, job = WatchHub(no_jobs), detached_job()
    with hub.subscribe(job.id) as watch:
        watch.offer(job)
        waiters = [asyncio.create_task(watch.newer_than(1, 60, hub.closing)) for _ in range(3)]
        await _until_parked(watch, 3)
        watch.offer(replace(job, version=2))
        assert [(await w).version for w in waiters] == [2, 2, 2]
        assert _parked(watch) == 0
    assert hub.watched == 0


async def test_a_timed_out_waiter_leavesno_jobs_behind_and_answers_what_it_has() -> None:
    hub, job = WatchHub(no_jobs), detached_job()
    with hub.subscribe(job.id) as watch:
        watch.offer(job)
        answer = await watch.newer_than(1, 0.01, hub.closing)
        assert answer.version == 1
        assert _parked(watch) == 0


async def test_a_cancelled_waiter_leavesno_jobs_behind_and_the_others_still_wake() -> None:
    hub, job = WatchHub(no_jobs), detached_job()
    with hub.subscribe(job.id) as watch:
        watch.offer(job)
        gone = asyncio.create_task(watch.newer_than(1, 60, hub.closing))
        stays = asyncio.create_task(watch.newer_than(1, 60, hub.closing))
        await _until_parked(watch, 2)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        assert _parked(watch) == 1
        watch.offer(replace(job, version=2))
        assert (await stays).version == 2
        assert _parked(watch) == 0


async def test_a_watch_re_subscribed_after_its_last_subscriber_left_is_a_fresh_one() -> None:
    hub, job = WatchHub(no_jobs), detached_job()
    with hub.subscribe(job.id) as first:
        first.offer(job)
    assert hub.watched == 0
    with hub.subscribe(job.id) as second:
        assert second is not first and second.latest is None
        with hub.subscribe(job.id) as third:
            assert third is second and second.subscribers == 2
        assert hub.watched == 1
    assert hub.watched == 0
