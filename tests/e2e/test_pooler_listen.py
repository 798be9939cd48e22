"""A server whose database URL goes through PgBouncer in transaction mode and
that is given no SETU_LISTEN_DATABASE_URL: LISTEN cannot hold a session
there, so the server says so (WARNING, /metrics, the health service) and
falls back to short re-checks, which still wake waiters and parked leases
promptly. With the listen URL pointed at PostgreSQL itself, all is well."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from setu_server.maintenance.listen_fallback import FIX
from setu_server.models import JobState
from setu_server.server import LISTEN_HEALTH, Running
from setu_server.store import jobs
from setu_server.store.pooler import shares_sessions
from tests.e2e.test_metrics import figures
from tests.factories import Tenant, make_job, make_task, make_tenant, parked_wait
from tests.pooler import PgBouncer
from tests.servers import in_process

# Nothing but the fallback may wake anybody here: the slow re-check and the
# lease poll are out of reach, and no worker runs.
QUIET = {
    "worker_processes": 0,
    "watch_recheck_seconds": 3600.0,
    "lease_poll_seconds": 3600.0,
    "lease_wait_cap_seconds": 3600.0,
    "listen_fallback_seconds": 0.2,
    # One probe, at the start: a pooled LISTEN session hands on a notification
    # now and then when a later ping lands in the session that LISTENed.
    "listen_probe_seconds": 3600.0,
}


async def listen_health(server: Running) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=LISTEN_HEALTH), timeout=10
        )
        return int(answer.status)


async def test_listen_through_a_transaction_pooler_warns_reports_and_falls_back(
    database_url: str,
    pool: asyncpg.Pool,
    pgbouncer: PgBouncer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    tenant: Tenant = await make_tenant(pool)
    async with in_process(pgbouncer.url(database_url), **QUIET) as server:
        await server.listener.wait_for_verdicts(1)
        warned = [r for r in caplog.records if r.levelno == logging.WARNING and FIX in r.message]
        assert len(warned) == 1, [r.message for r in caplog.records]
        assert "SETU_LISTEN_DATABASE_URL" in warned[0].message
        assert (await figures(server))("setu_listen_healthy") == 0
        assert await listen_health(server) == health_pb2.HealthCheckResponse.NOT_SERVING

        # A job ended by another process (this test's own connection): its
        # notification never reaches the server, the fallback's re-check does.
        job = await make_job(pool, tenant.workspace_id)
        wait = await parked_wait(server, tenant, job)
        await jobs.transition_job(pool, job.id, JobState.CANCELLED, now=None, message="ended")
        async with asyncio.timeout(30):
            assert (await wait).state is JobState.CANCELLED

        # A task queued by another process: the fallback wakes the parked lease.
        parked = asyncio.Event()

        async def mark(_: str) -> None:
            parked.set()

        server.tasks.hooks.parked = mark
        lease = asyncio.create_task(server.tasks.lease(str(tenant.agent_id), 3600.0))
        await parked.wait()
        task = await make_task(pool, tenant)
        async with asyncio.timeout(30):
            leased = await lease
        assert leased is not None and leased.id == task.id


async def test_listen_pointed_at_postgres_itself_is_healthy_and_never_falls_back(
    database_url: str,
    pool: asyncpg.Pool,
    pgbouncer: PgBouncer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    tenant: Tenant = await make_tenant(pool)
    settings = QUIET | {"listen_database_url": database_url}
    async with in_process(pgbouncer.url(database_url), **settings) as server:
        await server.listener.wait_for_verdicts(1)  # the first probe came back
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert (await figures(server))("setu_listen_healthy") == 1
        assert await listen_health(server) == health_pb2.HealthCheckResponse.SERVING
        job = await make_job(pool, tenant.workspace_id)
        wait = await parked_wait(server, tenant, job)
        await jobs.transition_job(pool, job.id, JobState.CANCELLED, now=None, message="ended")
        async with asyncio.timeout(30):
            assert (await wait).state is JobState.CANCELLED
        assert not server.services.fallback.active
        assert server.hub.rechecks == 0, "woken by the notification, not by a re-check"


async def test_auto_sees_a_transaction_pooler_and_not_postgres_itself(
    database_url: str, pgbouncer: PgBouncer
) -> None:
    assert await shares_sessions(pgbouncer.url(database_url))
    assert not await shares_sessions(database_url)
