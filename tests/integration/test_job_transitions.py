"""The one transition path, on real PostgreSQL."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from setu_client.errors import IllegalTransition, JobNotFound
from setu_server.models import JobState
from setu_server.store import db, jobs
from tests.factories import make_job, make_tenant


async def test_a_transition_bumps_version_logs_an_event_and_notifies(
    pool: asyncpg.Pool, database_url: str
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    heard: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    listener = await db.connect(database_url)
    await listener.add_listener("setu_job", lambda *args: heard.put_nowait(json.loads(args[-1])))
    try:
        moved = await jobs.transition_job(
            pool, job.id, JobState.RUNNING, now=None, message="Running in the cloud"
        )
        assert (moved.state, moved.version) == (JobState.RUNNING, job.version + 1)
        assert moved.started_at is not None and moved.finished_at is None
        note = await asyncio.wait_for(heard.get(), 10)
        snapshot = note.pop("snapshot")
        assert note == {"job_id": str(job.id), "version": moved.version, "state": "running"}
        assert isinstance(snapshot, dict) and snapshot["started_at"] is not None
        events = await jobs.list_job_events(pool, job.id, after=0, limit=10)
        assert [e.message for e in events] == ["Running in the cloud"]

        done = await jobs.transition_job(
            pool, job.id, JobState.FAILED, now=None, message="Failed", error_message="boom"
        )
        assert done.finished_at is not None and done.error_message == "boom"
    finally:
        await listener.close()


@pytest.mark.parametrize(
    ("start", "to"),
    [
        (JobState.READY, JobState.RUNNING),
        (JobState.PENDING, JobState.SUCCEEDED),
        (JobState.SUCCEEDED, JobState.CANCELLED),
        (JobState.CANCELLED, JobState.PENDING),
        (JobState.FAILED, JobState.RUNNING),
    ],
)
async def test_illegal_transitions_are_refused_and_change_nothing(
    pool: asyncpg.Pool, start: JobState, to: JobState
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id, state=start)
    with pytest.raises(IllegalTransition, match=f"is {start.value}: it cannot become {to.value}"):
        await jobs.transition_job(pool, job.id, to, now=None, message="nope")
    after = await jobs.get_job(pool, job.id, tenant.workspace_id)
    assert after == job
    assert await jobs.list_job_events(pool, job.id, after=0, limit=10) == []


async def test_an_unknown_job_cannot_transition(pool: asyncpg.Pool) -> None:
    import uuid

    with pytest.raises(JobNotFound):
        await jobs.transition_job(pool, uuid.uuid4(), JobState.RUNNING, now=None, message="x")


async def test_racing_terminal_transitions_have_exactly_one_winner(pool: asyncpg.Pool) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    outcomes = await asyncio.gather(
        *(
            jobs.transition_job(pool, job.id, to, now=None, message=to.value)
            for to in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED) * 3
        ),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(o, IllegalTransition) for o in outcomes if o not in winners)
    assert len(await jobs.list_job_events(pool, job.id, after=0, limit=100)) == 1
