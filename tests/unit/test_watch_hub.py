"""The watch hub without I/O: a loader function stands in for the database read
(it is the hub's own seam, not a mock of PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from setu_server.models import Job, JobKind, JobState
from setu_server.service.watch import WatchHub

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _job(state: JobState = JobState.PENDING, version: int = 1) -> Job:
    return Job(
        id=uuid.uuid4(),
        workspace_id=uuid.uuid4(),
        kind=JobKind.TEST,
        state=state,
        version=version,
        created_at=NOW,
        updated_at=NOW,
    )


class Table:
    """What the database holds; the hub reads it in batches."""

    def __init__(self) -> None:
        self.rows: dict[uuid.UUID, Job] = {}
        self.reads: list[int] = []

    async def load(self, ids: list[uuid.UUID]) -> list[Job]:
        self.reads.append(len(ids))
        return [self.rows[i] for i in ids if i in self.rows]


def _note(job: Job) -> str:
    return json.dumps({"job_id": str(job.id), "version": job.version, "state": job.state.value})


async def test_a_watch_lives_while_somebody_subscribes() -> None:
    hub = WatchHub(Table().load)
    job = _job()
    with hub.subscribe(job.id), hub.subscribe(job.id):
        assert hub.watched == 1
    assert hub.watched == 0


async def test_publish_wakes_waiters_with_the_newer_snapshot_only() -> None:
    hub = WatchHub(Table().load)
    job = _job()
    with hub.subscribe(job.id) as watch:
        watch.offer(job)
        waiter = asyncio.create_task(watch.newer_than(1, None, hub.closing))
        await asyncio.sleep(0)
        hub.publish([replace(job, version=1)])  # not newer: ignored
        await asyncio.sleep(0)
        assert not waiter.done()
        done = replace(job, state=JobState.SUCCEEDED, version=2)
        hub.publish([done])
        assert await waiter == done


async def test_notifications_are_reread_in_batches_and_ignored_when_unwatched() -> None:
    table = Table()
    hub = WatchHub(table.load)
    watched = [_job() for _ in range(5)]
    other = _job()
    with hub.subscribe(watched[0].id) as first:
        subs = [hub.subscribe(j.id) for j in watched[1:]]
        watches = [first] + [s.__enter__() for s in subs]
        for w, j in zip(watches, watched, strict=True):
            w.offer(j)
        for j in [*watched, other]:
            table.rows[j.id] = replace(j, state=JobState.RUNNING, version=2)
            hub.notified(_note(table.rows[j.id]))
        hub.notified("not json")
        await asyncio.gather(*(w.newer_than(1, None, hub.closing) for w in watches))
        assert table.reads == [5], "one read for the five watched jobs, none for the other"
        assert all(w.latest and w.latest.state is JobState.RUNNING for w in watches)
        for s in subs:
            s.__exit__(None, None, None)


async def test_refresh_all_recovers_a_lost_notification() -> None:
    table = Table()
    hub = WatchHub(table.load)
    job = _job()
    with hub.subscribe(job.id) as watch:
        watch.offer(job)
        table.rows[job.id] = replace(job, state=JobState.SUCCEEDED, version=3)
        await hub.refresh_all()
        assert watch.latest is not None and watch.latest.version == 3


@pytest.mark.looptime
async def test_close_answers_parked_waiters_at_once_with_what_they_have() -> None:
    hub = WatchHub(Table().load)
    job = _job()
    loop = asyncio.get_running_loop()
    with hub.subscribe(job.id) as watch:
        watch.offer(job)
        started = loop.time()
        waiter = asyncio.create_task(watch.newer_than(1, 60, hub.closing))
        await asyncio.sleep(5)
        await hub.close()
        assert await waiter == job
        assert loop.time() - started == pytest.approx(5)


@pytest.mark.looptime
async def test_a_timed_wait_ends_with_the_latest_snapshot() -> None:
    hub = WatchHub(Table().load)
    job = _job()
    loop = asyncio.get_running_loop()
    with hub.subscribe(job.id) as watch:
        watch.offer(job)
        started = loop.time()
        assert await watch.newer_than(1, 60, hub.closing) == job
        assert loop.time() - started == pytest.approx(60, abs=0.01)
