"""A `setu_job` notification carries the job's snapshot: the watch hub wakes
its waiters from it with no read, and reads only when the snapshot would
have passed PostgreSQL's 8,000-byte payload limit."""

from __future__ import annotations

import asyncio

import asyncpg

from setu_server.models import Job, JobState
from setu_server.server import Running
from setu_server.store import jobs
from tests.factories import Tenant, make_job, parked_wait


async def _end_elsewhere(pool: asyncpg.Pool, job: Job, error: str) -> None:
    """Through the store alone, as another server would: this process
    learns of it only from the notification."""
    await jobs.transition_job(
        pool, job.id, JobState.FAILED, now=None, message="Failed", error_message=error
    )


async def test_a_notification_wakes_a_waiter_from_its_snapshot_with_no_read(
    server: Running, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    wait = await parked_wait(server, tenant, job)
    reads, applied = server.hub.reads, server.hub.applied
    await _end_elsewhere(pool, job, "the source went away")
    answer = await asyncio.wait_for(wait, 30)
    assert answer.state is JobState.FAILED and answer.error_message == "the source went away"
    assert answer.finished_at is not None and answer.version == job.version + 1
    assert answer.workspace_id == tenant.workspace_id, "the rest of the job is kept"
    assert server.hub.reads == reads, "woken from the payload: no database read"
    assert server.hub.applied == applied + 1


async def test_a_snapshot_past_the_payload_limit_falls_back_to_a_read(
    server: Running, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    wait = await parked_wait(server, tenant, job)
    reads, applied = server.hub.reads, server.hub.applied
    long_error = "x" * 9000  # a snapshot of it would pass 8,000 bytes
    await _end_elsewhere(pool, job, long_error)
    answer = await asyncio.wait_for(wait, 30)
    assert answer.state is JobState.FAILED and answer.error_message == long_error
    assert server.hub.reads == reads + 1, "the job was read"
    assert server.hub.applied == applied
