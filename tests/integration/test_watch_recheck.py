"""The watch hub's re-check against real PostgreSQL: it sends the versions the
hub holds and gets back only the rows that are newer, so a re-check of
10,000 watched jobs costs what changed behind the hub's back, not what is
watched."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator

import asyncpg
import pytest

from setu_server.models import Job, JobState
from setu_server.service.watch import Watch, WatchHub
from setu_server.store import jobs
from tests.factories import make_tenant

WATCHED = 10_000


def _hub(pool: asyncpg.Pool) -> WatchHub:
    """Wired as setu_server/server.py wires it."""
    return WatchHub(
        lambda ids: jobs.get_jobs(pool, ids),
        changed=lambda ids, versions: jobs.changed_jobs(pool, ids, versions),
    )


async def _running_jobs(pool: asyncpg.Pool, count: int) -> list[uuid.UUID]:
    tenant = await make_tenant(pool)
    ids = [uuid.uuid4() for _ in range(count)]
    await pool.executemany(
        "INSERT INTO job (id, workspace_id, kind, state, created_at, updated_at) "
        "VALUES ($1, $2, 'test', 'running', now(), now())",
        [(i, tenant.workspace_id) for i in ids],
    )
    return ids


async def _change_behind_the_hubs_back(pool: asyncpg.Pool, ids: list[uuid.UUID]) -> None:
    """What a lost notification leaves: a newer row that told nobody (a
    plain UPDATE sends no NOTIFY; only setu_transition_jobs does)."""
    await pool.execute(
        "UPDATE job SET state = 'succeeded', version = version + 1, finished_at = now() "
        "WHERE id = ANY($1::uuid[])",
        ids,
    )


@contextlib.contextmanager
def _watching(hub: WatchHub, ids: list[uuid.UUID]) -> Iterator[list[Watch]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(hub.subscribe(job_id)) for job_id in ids]


class Turns:
    """Counts the turns of the event loop it gets (one per turn while others
    run), so a test sees whether two steps ran in the same turn."""

    def __init__(self) -> None:
        self.count = 0
        self._task = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.count += 1

    def stop(self) -> None:
        self._task.cancel()


class Conversions:
    """Every row the store turns into a Job (`job_of`), by job id, and the
    turn of the event loop it was converted in (`Turns`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, turns: Turns | None = None) -> None:
        self.ids: list[uuid.UUID] = []
        self.turns: list[int] = []
        convert = jobs.job_of

        def counting(row: asyncpg.Record) -> Job:
            self.ids.append(row["id"])
            self.turns.append(turns.count if turns else 0)
            return convert(row)

        monkeypatch.setattr(jobs, "job_of", counting)


async def test_a_recheck_of_10000_watched_jobs_converts_and_offers_only_the_3_changed(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = await _running_jobs(pool, WATCHED)
    hub = _hub(pool)
    with _watching(hub, ids) as watches:
        await hub.refresh_all()  # a new watch holds nothing: the whole rows
        assert all(w.latest is not None and w.latest.version == 1 for w in watches)
        changed = ids[17], ids[4_321], ids[-1]
        await _change_behind_the_hubs_back(pool, list(changed))
        parked = asyncio.create_task(watches[4_321].newer_than(1, None, hub.closing))
        offered: list[uuid.UUID] = []
        publish = hub.publish

        def recording(found: list[Job]) -> None:
            offered.extend(job.id for job in found)
            publish(found)

        monkeypatch.setattr(hub, "publish", recording)
        conversions = Conversions(monkeypatch)
        fetched = hub.fetched

        await hub.run_once()

        assert sorted(offered) == sorted(changed), "exactly the changed jobs are offered"
        assert sorted(conversions.ids) == sorted(changed), "no other row becomes a Job"
        assert hub.fetched - fetched == 3
        assert hub.rechecks == 1
        woken = await asyncio.wait_for(parked, 30)
        assert woken.state is JobState.SUCCEEDED and woken.version == 2
        for w, job_id in zip(watches, ids, strict=True):
            assert w.latest is not None
            assert w.latest.version == (2 if job_id in changed else 1)


async def test_a_watch_that_holds_nothing_yet_reads_the_whole_row(pool: asyncpg.Pool) -> None:
    held, empty = await _running_jobs(pool, 2)
    hub = _hub(pool)
    with _watching(hub, [held, empty]) as (holding, nothing):
        await hub.refresh_all()
        assert holding.latest is not None and nothing.latest is not None
        await pool.execute("UPDATE job SET rows_total = 7 WHERE id = $1", empty)
        nothing.latest = None  # as a watch created after the last read
        await hub.refresh_all()
        assert nothing.latest is not None, "no snapshot held: the row is read whatever its version"
        assert nothing.latest.rows_total == 7 and nothing.latest.version == 1
        assert hub.fetched == 3, "two rows first, then the one with nothing held"


async def test_many_changed_rows_become_jobs_a_slice_per_turn(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = await _running_jobs(pool, 2 * jobs.CONVERT_PER_TURN + 50)
    turns = Turns()
    conversions = Conversions(monkeypatch, turns)
    found = await jobs.changed_jobs(pool, ids, [0] * len(ids))
    turns.stop()
    assert sorted(j.id for j in found) == sorted(ids)
    slices = [conversions.turns.count(turn) for turn in sorted(set(conversions.turns))]
    assert slices == [jobs.CONVERT_PER_TURN, jobs.CONVERT_PER_TURN, 50], (
        "the loop runs between slices of rows made Jobs"
    )
