"""Long-polls through a real nginx in front of setu-server
(docs/operations.md#proxies-and-load-balancers).

Times are scaled down, each standing for the production figure: the route
"short" cuts any call nginx holds 2 s (Envoy's 15 s), the route "at_cap"
cuts at 3 s, the WaitJob cap these servers run with (nginx's default 60 s
read timeout against the 60 s cap); a retry budget of 2 s stands for the
SDK's 300 s, and a job that ends 6 s after its wait began for one that ends
after 6 minutes: longer than the budget, across several cuts. The SDK's
default window is scaled the same way (55 s of the 60 s cap).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from setu_client import JobState as ClientJobState
from setu_client import RetryPolicy, SetuClient
from setu_client._client import SERVER_WAIT_CAP_SECONDS
from setu_client.long_poll import DEFAULT_LONG_POLL_SECONDS
from setu_server.models import JobState
from setu_server.server import Running
from setu_server.store import jobs
from tests.factories import Tenant, make_job, make_task
from tests.servers import checked_in_agent, in_process
from tests.topology import (
    PROXY_CAP_SECONDS,
    PROXY_SHORT_SECONDS,
    GrpcProxy,
    grpc_proxy_fixture,  # noqa: F401  (the `grpc_proxy` fixture: the session's nginx)
)

pytestmark = pytest.mark.slow

BUDGET = RetryPolicy(long_poll_budget_seconds=2.0)
JOB_SECONDS = 6.0
# nginx's timer starts after the server's on an idle machine, so the server
# mostly wins the race at the cap; under load it loses it (the issue saw 256
# of 256 lost). A cap a quarter second longer than the proxy's timeout loses
# it every time.
LOST_RACE_CAP = PROXY_CAP_SECONDS + 0.25
# The SDK's default window against the default cap, scaled to the cap here;
# and the deadline it used to send, the cap plus 15 s: the server then
# answers at its cap, and races nginx.
DEFAULT_WINDOW = PROXY_CAP_SECONDS * DEFAULT_LONG_POLL_SECONDS / SERVER_WAIT_CAP_SECONDS
OLD_WINDOW = LOST_RACE_CAP + 15.0


@pytest.fixture
async def proxied(
    database_url: str, grpc_proxy: GrpcProxy, request: pytest.FixtureRequest
) -> AsyncIterator[Running]:
    """A server behind the session's nginx, with the scaled WaitJob cap."""
    marker = request.node.get_closest_marker("server")
    settings = {"worker_processes": 0, "wait_cap_seconds": PROXY_CAP_SECONDS} | (
        marker.kwargs if marker else {}
    )
    async with in_process(database_url, listen=grpc_proxy.upstream, **settings) as server:
        yield server


def ends_after(server: Running, pool: asyncpg.Pool, job_id: uuid.UUID, seconds: float) -> None:
    """Ends the job at the first WaitJob call that reaches the server
    `seconds` after the first one did: no call reaching it, no end."""
    loop = asyncio.get_running_loop()
    first: list[float] = []

    async def arrived(waited: uuid.UUID) -> None:
        first.append(loop.time())
        if waited == job_id and loop.time() - first[0] >= seconds:
            await jobs.transition_job(pool, job_id, JobState.SUCCEEDED, now=None, message="done")

    server.jobs.hooks.after_subscribe = arrived


def cuts(server: Running, method: str) -> float:
    return (
        server.services.metrics.registry.get_sample_value(
            "setu_long_poll_cuts_total", {"method": method}
        )
        or 0.0
    )


async def test_wait_for_job_outlasts_a_proxy_that_cuts_every_long_poll(
    proxied: Running,
    grpc_proxy: GrpcProxy,
    pool: asyncpg.Pool,
    tenant: Tenant,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    ends_after(proxied, pool, job.id, JOB_SECONDS)
    target = grpc_proxy.target("short")
    with caplog.at_level(logging.INFO, "setu.long_poll"):
        async with SetuClient(target, tenant.api_key, retry=BUDGET) as client:
            outcome = await asyncio.wait_for(client.wait_for_job(str(job.id)), 60)
            learned = client.long_polls.cut
    assert outcome.state == ClientJobState.SUCCEEDED
    assert learned is not None and learned >= PROXY_SHORT_SECONDS
    said = [m for m in caplog.messages if "are cut after" in m]
    assert said == [
        f"long-polls to {target} are cut after ~2 s by something in between; "
        "waiting 1.5 s per call from now on"
    ]
    # The server saw the cut call go (nginx closed its upstream stream).
    assert cuts(proxied, "WaitJob") >= 1


@pytest.mark.server(wait_cap_seconds=LOST_RACE_CAP)
@pytest.mark.parametrize("window", [DEFAULT_WINDOW, OLD_WINDOW], ids=["default", "above_cap"])
async def test_wait_for_job_through_nginx_cutting_at_the_cap(
    proxied: Running, grpc_proxy: GrpcProxy, pool: asyncpg.Pool, tenant: Tenant, window: float
) -> None:
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    ends_after(proxied, pool, job.id, JOB_SECONDS)
    async with SetuClient(
        grpc_proxy.target("at_cap"), tenant.api_key, retry=BUDGET, long_poll_seconds=window
    ) as client:
        outcome = await asyncio.wait_for(client.wait_for_job(str(job.id)), 60)
    assert outcome.state == ClientJobState.SUCCEEDED


async def test_watch_job_outlasts_a_proxy_that_cuts_every_long_poll(
    proxied: Running, grpc_proxy: GrpcProxy, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    loop = asyncio.get_running_loop()
    started = loop.time()
    watches = 0

    async def watching(job_id: uuid.UUID) -> None:
        nonlocal watches
        watches += 1
        if loop.time() - started >= JOB_SECONDS:
            await jobs.transition_job(pool, job.id, JobState.SUCCEEDED, now=None, message="done")

    proxied.jobs.hooks.watching = watching
    async with SetuClient(grpc_proxy.target("short"), tenant.api_key, retry=BUDGET) as client:
        seen = [j.state async for j in client.watch_job(str(job.id))]
    assert seen[0] == ClientJobState.RUNNING
    assert seen[-1] == ClientJobState.SUCCEEDED
    assert watches > 2  # resumed across cuts and windows


@pytest.mark.server(lease_wait_cap_seconds=30.0)
async def test_an_agent_works_through_the_short_proxy_and_warns_of_nothing_while_idle(
    proxied: Running, grpc_proxy: GrpcProxy, pool: asyncpg.Pool, tenant: Tenant, tmp_path: Path
) -> None:
    lines: list[bytes] = []
    learned = asyncio.Event()

    def heard(line: bytes) -> None:
        lines.append(line)
        if b"are cut after" in line:
            learned.set()

    parks = 0
    parked_again = asyncio.Event()

    async def parked(runtime: str) -> None:
        nonlocal parks
        if learned.is_set():
            parks += 1
            if parks >= 3:
                parked_again.set()

    proxied.tasks.hooks.parked = parked
    port = grpc_proxy.ports["short"]
    handlers = {"SETU_AGENT_EXTRA_HANDLERS": "tests.e2e.agent_handlers:HANDLERS"}
    async with checked_in_agent(
        port, tenant.agent_token, tmp_path / "agent.log", heard, **handlers
    ):
        # Idle: the first lease is cut at 2 s; the agent learns it, and
        # leases again and again within the window it learned.
        await asyncio.wait_for(learned.wait(), 60)
        await asyncio.wait_for(parked_again.wait(), 60)
        task = await make_task(pool, tenant)
        async with SetuClient(grpc_proxy.target("short"), tenant.api_key) as client:
            outcome = await asyncio.wait_for(client.wait_for_job(str(task.job_id)), 60)
    assert outcome.state == ClientJobState.SUCCEEDED
    warned = [line for line in lines if b'"level": "warning"' in line]
    assert warned == []
    assert cuts(proxied, "LeaseTask") >= 1


PARKED = 1_100


@pytest.mark.server(wait_cap_seconds=3600.0)
async def test_waits_beyond_the_proxys_stream_limit_do_not_stall_short_calls(
    proxied: Running, grpc_proxy: GrpcProxy, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    waited = [
        await make_job(pool, tenant.workspace_id, state=JobState.RUNNING) for _ in range(PARKED)
    ]
    # nginx takes 128 streams per connection: with two long-poll channels,
    # 256 waits park at the server and the rest queue in the client.
    at_limit = asyncio.Event()
    parked = 0

    async def arrived(job_id: uuid.UUID) -> None:
        nonlocal parked
        parked += 1
        if parked == 256:
            at_limit.set()

    proxied.jobs.hooks.after_read = arrived
    async with SetuClient(
        grpc_proxy.target("defaults"), tenant.api_key, long_poll_seconds=3600.0
    ) as client:
        waits = [asyncio.create_task(client.wait_for_job(str(j.id))) for j in waited]
        await asyncio.wait_for(at_limit.wait(), 120)
        # A short call of the same client, with 1,100 waits in flight.
        got = await client.get_job(str(waited[0].id))
        assert got.state == ClientJobState.RUNNING
        assert not any(w.done() for w in waits)
        await jobs.transition_jobs(
            pool, [j.id for j in waited], JobState.SUCCEEDED, now=None, message="done"
        )
        outcomes = await asyncio.wait_for(asyncio.gather(*waits), 120)
    assert {o.state for o in outcomes} == {ClientJobState.SUCCEEDED}
