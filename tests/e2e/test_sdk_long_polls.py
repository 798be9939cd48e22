"""The SDK's long-polls against a real in-process server: their own
connections, a retry budget that starts afresh after every good answer, and
a backoff capped low enough that a waiter hears of its job's end soon after
an outage. Outages are a WaitJob hook answering UNAVAILABLE, as the server
does when its database is unreachable."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from setu_client import JobState as ClientJobState
from setu_client import RetryPolicy, SetuClient
from setu_client.errors import Unavailable
from setu_server.models import JobState
from setu_server.server import Running
from setu_server.store import jobs
from tests.factories import Tenant, make_job, make_tenant
from tests.servers import in_process

# No cloud workers: they would hold connections of their own to the server.
QUIET = {"worker_processes": 0}


@pytest.fixture
async def tenant_of(pool: asyncpg.Pool) -> Tenant:
    return await make_tenant(pool)


@pytest.fixture
async def quiet_server(database_url: str) -> AsyncIterator[Running]:
    async with in_process(database_url, **(QUIET | {"wait_cap_seconds": 1.0})) as running:
        yield running


async def finish(pool: asyncpg.Pool, job_id: uuid.UUID) -> None:
    await jobs.transition_job(pool, job_id, JobState.RUNNING, now=None, message="r")
    await jobs.transition_job(pool, job_id, JobState.SUCCEEDED, now=None, message="d")


def connections_to(port: int) -> int:
    """Established TCP connections to `port` on 127.0.0.1, counted at the
    client's end (the server's ends have `port` as their local port)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # grpc's sockets may be v4-mapped v6
        for line in Path(table).read_text().splitlines()[1:]:
            remote, state = line.split()[2:4]
            if state == "01" and remote.endswith(f"0100007F:{port:04X}"):
                count += 1
    return count


async def test_long_polls_travel_on_their_own_connections(
    database_url: str, pool: asyncpg.Pool, tenant_of: Tenant
) -> None:
    waited = [await make_job(pool, tenant_of.workspace_id) for _ in range(2)]
    async with in_process(database_url, wait_cap_seconds=3600.0, **QUIET) as server:
        parked = 0
        both_parked = asyncio.Event()

        async def mark(job_id: uuid.UUID) -> None:
            nonlocal parked
            parked += 1
            if parked == 2:
                both_parked.set()

        server.jobs.hooks.after_read = mark
        async with SetuClient(
            f"127.0.0.1:{server.port}", tenant_of.api_key, long_poll_channels=2
        ) as client:
            waits = [asyncio.create_task(client.wait_for_job(str(j.id))) for j in waited]
            await both_parked.wait()
            await client.get_job(str(waited[0].id))  # a short call, while both are parked
            # One connection for short calls and one per long-poll channel:
            # the two parked waits took a channel each, neither the short one's.
            assert connections_to(server.port) == 3
            for job in waited:
                await finish(pool, job.id)
            answers = await asyncio.wait_for(asyncio.gather(*waits), 30)
    assert [a.state for a in answers] == [ClientJobState.SUCCEEDED] * 2


async def test_by_default_long_polls_share_two_connections(
    database_url: str, pool: asyncpg.Pool, tenant_of: Tenant
) -> None:
    # Four parked waits on a client with the default pool: two long-poll
    # connections beside the short calls' one (a pool of 1 would make 2 in
    # all, of 3 or more 4 or 5).
    waited = [await make_job(pool, tenant_of.workspace_id) for _ in range(4)]
    async with in_process(database_url, wait_cap_seconds=3600.0, **QUIET) as server:
        parked = 0
        all_parked = asyncio.Event()

        async def mark(job_id: uuid.UUID) -> None:
            nonlocal parked
            parked += 1
            if parked == len(waited):
                all_parked.set()

        server.jobs.hooks.after_read = mark
        async with SetuClient(f"127.0.0.1:{server.port}", tenant_of.api_key) as client:
            waits = [asyncio.create_task(client.wait_for_job(str(j.id))) for j in waited]
            await all_parked.wait()
            await client.get_job(str(waited[0].id))
            assert connections_to(server.port) == 1 + 2
            for job in waited:
                await finish(pool, job.id)
            answers = await asyncio.wait_for(asyncio.gather(*waits), 30)
    assert [a.state for a in answers] == [ClientJobState.SUCCEEDED] * 4


@pytest.mark.looptime(noop_cycles=5000)
async def test_the_retry_budget_starts_afresh_after_every_good_answer(
    quiet_server: Running, pool: asyncpg.Pool, tenant_of: Tenant
) -> None:
    loop = asyncio.get_running_loop()
    job = await make_job(pool, tenant_of.workspace_id)
    start = loop.time()

    answered = False

    # Two outages of about a minute, around one good (capped, non-terminal)
    # answer: together far past the 100 s budget, each well within it.
    async def outages(job_id: uuid.UUID) -> None:
        nonlocal answered
        elapsed = loop.time() - start
        if elapsed < 60:
            raise Unavailable("the database is unreachable")
        if not answered:
            answered = True  # this call parks for the 1 s cap: OK, not terminal
            return
        if elapsed < 130:
            raise Unavailable("the database is unreachable again")
        await finish(pool, job.id)

    quiet_server.jobs.hooks.after_subscribe = outages
    policy = RetryPolicy(
        initial_seconds=1.0,
        max_seconds=5.0,
        long_poll_budget_seconds=100.0,
        long_poll_max_seconds=5.0,
    )
    async with SetuClient(
        f"127.0.0.1:{quiet_server.port}", tenant_of.api_key, retry=policy
    ) as client:
        answer = await client.wait_for_job(str(job.id))
    assert answer.state == ClientJobState.SUCCEEDED
    assert loop.time() - start >= 130


@pytest.mark.looptime(noop_cycles=5000)
async def test_long_poll_retries_back_off_no_further_than_the_long_poll_cap(
    quiet_server: Running, pool: asyncpg.Pool, tenant_of: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    job = await make_job(pool, tenant_of.workspace_id)
    await finish(pool, job.id)
    start = loop.time()
    ceilings: list[float] = []

    def at_ceiling(low: float, high: float) -> float:
        ceilings.append(high)
        return high

    monkeypatch.setattr(random, "uniform", at_ceiling)

    async def outage(job_id: uuid.UUID) -> None:
        if loop.time() - start < 60:
            raise Unavailable("the database is unreachable")

    quiet_server.jobs.hooks.after_subscribe = outage
    policy = RetryPolicy()
    async with SetuClient(f"127.0.0.1:{quiet_server.port}", tenant_of.api_key) as client:
        answer = await client.wait_for_job(str(job.id))
    assert answer.state == ClientJobState.SUCCEEDED
    # A minute of failures reaches the cap, and never backs off past it (the
    # short-call cap, 10 s, would leave a waiter up to 10 s late).
    assert max(ceilings) == policy.long_poll_max_seconds < policy.max_seconds
