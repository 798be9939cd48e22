"""docs/operations.md#postgresql-through-a-pooler on loopback: PgBouncer in
transaction mode in front of Setu's PostgreSQL, two setu-server replicas
started at once through it (SETU_DATABASE_POOLER=transaction, LISTEN on
PostgreSQL itself through SETU_LISTEN_DATABASE_URL), two setu-worker
processes and an agent. A run in each of the four flows succeeds; a few
hundred waits parked on either replica are woken by jobs ended through the
pooler by another process; each replica restarts through the pooler while
the other serves. No answer is INTERNAL (the SDK would raise)."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_server.models import JobState
from setu_server.store import db, jobs
from tests.databases import postgres_config, scratch_database
from tests.e2e.test_edge_runs import fill, rows_of
from tests.e2e.test_metrics import Figures
from tests.e2e.test_topology import WORKER_TOKEN, worker
from tests.factories import Tenant, make_job, make_tenant
from tests.pooler import PgBouncer
from tests.s3server import S3Endpoint
from tests.servers import checked_in_agent, free_port, server_process, wait_healthy

S = common_pb2
pytestmark = pytest.mark.slow

ROWS = 300
# Waits: JOBS jobs, each waited on through both replicas, parked BATCH at a time.
JOBS = 240
BATCH = 40
# What a process says when named prepared statements meet a transaction pooler.
PREPARED_STATEMENT_ERRORS = ("DuplicatePreparedStatement", "InvalidSQLStatementName")


@dataclass
class Replica:
    """A setu-server process on fixed ports, so that a restart comes back
    where its clients, workers and agents look for it."""

    env: dict[str, str]
    log: Path
    port: int = field(default_factory=free_port)
    http: int = field(default_factory=free_port)
    _process: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def start(self) -> None:
        env = self.env | {"SETU_HTTP_LISTEN": f"127.0.0.1:{self.http}"}
        self._process.enter_context(server_process(env, self.log, self.port))

    def stop(self) -> None:
        self._process.close()

    async def figures(self) -> Figures:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{self.http}/metrics") as response,
        ):
            assert response.status == 200
            return Figures(await response.text())

    async def settled(self, holds: Callable[[Figures], bool]) -> Figures:
        """Scrapes until `holds` (test_metrics.settled, for a process)."""
        async with asyncio.timeout(30):
            while True:
                now = await self.figures()
                if holds(now):
                    return now
                await asyncio.sleep(0.01)


async def woken(client: SetuClient, job_id: str) -> tuple[str, float, int]:
    job = await client.wait_for_job(job_id)
    return job_id, asyncio.get_running_loop().time(), job.state


async def wake_latencies(
    pool: asyncpg.Pool,
    tenant: Tenant,
    replicas: list[Replica],
    clients: list[SetuClient],
    count: int,
    batch: int,
) -> list[float]:
    """Seconds from the start of each job's ending transition (committed
    through `pool`, another process than either replica) to its waiter's
    return, for a waiter on every replica."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    for _ in range(count // batch):
        made = [(await make_job(pool, tenant.workspace_id)).id for _ in range(batch)]
        waits = [asyncio.create_task(woken(c, str(job_id))) for job_id in made for c in clients]
        for replica in replicas:  # every wait parked: one watch per job on each replica
            await replica.settled(lambda f: f("setu_watch_hub_watches") == batch)
        ended: dict[str, float] = {}
        for job_id in made:
            ended[str(job_id)] = loop.time()
            await jobs.transition_job(
                pool, job_id, JobState.CANCELLED, now=None, message="ended elsewhere"
            )
        async with asyncio.timeout(60):
            for job_id, at, state in await asyncio.gather(*waits):
                assert state == S.JOB_STATE_CANCELLED
                latencies.append(at - ended[job_id])
    return latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def test_two_replicas_through_a_transaction_pooler_run_every_flow_wake_and_restart(
    database_url: str,
    pool: asyncpg.Pool,
    pg_server_url: str,
    pgbouncer: PgBouncer,
    s3_endpoint: S3Endpoint,
    tmp_path: Path,
) -> None:
    tenant: Tenant = await make_tenant(pool)
    bucket = await s3_endpoint.make_bucket()
    env = s3_endpoint.env | {
        "SETU_DATABASE_URL": pgbouncer.url(database_url),
        "SETU_DATABASE_POOLER": "transaction",
        "SETU_LISTEN_DATABASE_URL": database_url,
        "SETU_BLOB_URL": f"s3://{bucket}",
        "SETU_S3_ENDPOINT_URL": s3_endpoint.endpoint_url,
        "SETU_WORKER_PROCESSES": "0",
        "SETU_WORKER_TOKEN": WORKER_TOKEN,
        "SETU_LOG_FORMAT": "text",
        # Only notifications may wake a waiter here: no periodic re-check.
        "SETU_WATCH_RECHECK_SECONDS": "3600",
    }
    a, b = Replica(env, tmp_path / "server-a.log"), Replica(env, tmp_path / "server-b.log")
    # The jobs of the waits end through the pooler too, from this process.
    pooled = await db.create_pool(pgbouncer.url(database_url), max_size=2, statement_cache=False)
    try:
        a.start()
        b.start()
        await asyncio.gather(wait_healthy(a.port), wait_healthy(b.port))
        async with (
            scratch_database(pg_server_url) as source,
            scratch_database(pg_server_url) as destination,
            worker(a.port, s3_endpoint, tmp_path / "worker-a.log"),
            worker(b.port, s3_endpoint, tmp_path / "worker-b.log"),
            checked_in_agent(b.port, tenant.agent_token, tmp_path / "agent.log", **s3_endpoint.env),
            SetuClient(f"127.0.0.1:{a.port}", tenant.api_key) as through_a,
            SetuClient(f"127.0.0.1:{b.port}", tenant.api_key) as through_b,
        ):
            await fill(source, "orders", ROWS)
            expected = await rows_of(source, "orders")
            agent = str(tenant.agent_id)
            ends = {}
            for at, placement in (("cloud", "cloud"), ("agent", "agent")):
                extra = (placement, agent) if placement == "agent" else ()
                ends[at] = (
                    await through_a.create_connection(
                        f"src-{at}", "postgres", postgres_config(source), *extra
                    ),
                    await through_b.create_connection(
                        f"dst-{at}", "postgres", postgres_config(destination), *extra
                    ),
                )
            for extract_at in ("cloud", "agent"):
                for load_at in ("cloud", "agent"):
                    table = f"{extract_at[0]}2{load_at[0]}"
                    pipeline = await through_a.create_pipeline(
                        table,
                        ends[extract_at][0].id,
                        ends[load_at][1].id,
                        streams=["orders"],
                        spec={"destination": {"orders": table}},
                    )
                    job = await through_a.submit_run(pipeline.id)
                    await through_b.wait_for_job(job.id)  # woken through the other replica
                    done = await through_a.get_job(job.id)
                    assert done.state == S.JOB_STATE_SUCCEEDED, (table, done.error_message)
                    assert await rows_of(destination, table) == expected, table

            latencies = await wake_latencies(
                pooled, tenant, [a, b], [through_a, through_b], JOBS, BATCH
            )
            print(
                f"\nwake latency through PgBouncer (transaction mode), {len(latencies)} waits "
                f"on 2 replicas: p50 {statistics.median(latencies) * 1000:.1f} ms, "
                f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms, "
                f"max {max(latencies) * 1000:.1f} ms"
            )
            for replica in (a, b):
                seen = await replica.figures()
                assert seen("setu_listen_healthy") == 1
                assert seen("setu_watch_rechecks_total") == 0, "woken by notifications alone"
                notified = seen("setu_listen_notifications_received_total", channel="setu_job")
                assert notified >= JOBS

            # A rolling restart through the pooler: each replica while the other serves.
            for replica in (a, b):
                replica.stop()
                replica.start()
                await wait_healthy(replica.port)
                await replica.settled(lambda f: f("setu_listen_healthy") == 1)
                woke = await wake_latencies(pooled, tenant, [a, b], [through_a, through_b], 4, 4)
                assert len(woke) == 8
    finally:
        a.stop()
        b.stop()
        await pooled.close()
    logs = "\n".join(log.read_text(errors="replace") for log in (a.log, b.log))
    for error in PREPARED_STATEMENT_ERRORS:
        assert error not in logs
