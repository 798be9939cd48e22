"""10,000 waiters parked on 10,000 jobs that all end within one second."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_server.models import JobState
from setu_server.store import jobs
from tests.factories import make_tenant
from tests.servers import in_process

WAITERS = 10_000


async def test_ten_thousand_waiters_all_get_the_terminal_state(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    ids = [uuid.uuid4() for _ in range(WAITERS)]
    await pool.executemany(
        "INSERT INTO job (id, workspace_id, kind, state, created_at, updated_at) "
        "VALUES ($1, $2, 'test', 'running', now(), now())",
        [(i, tenant.workspace_id) for i in ids],
    )
    parked = 0
    all_parked = asyncio.Event()

    async def mark(job_id: uuid.UUID) -> None:
        nonlocal parked
        parked += 1
        if parked == WAITERS:
            all_parked.set()

    async with in_process(database_url, wait_cap_seconds=3600.0) as server:
        server.jobs.hooks.after_read = mark
        async with SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client:
            waiting = [asyncio.create_task(client.wait_for_job(str(i))) for i in ids]
            await asyncio.wait_for(all_parked.wait(), 240)
            assert server.hub.watched == WAITERS
            # All end in one statement, as another server would end them: this
            # server hears 10,000 notifications and re-reads them in batches.
            moved = await jobs.transition_jobs(
                pool, ids, JobState.SUCCEEDED, now=None, message="done"
            )
            assert len(moved) == WAITERS
            answers = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 240)
    errors = [a for a in answers if isinstance(a, BaseException)]
    assert errors == []
    assert {a.state for a in answers} == {common_pb2.JOB_STATE_SUCCEEDED}  # type: ignore[union-attr]
