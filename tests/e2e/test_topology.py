"""The layout of docs/operations.md#several-machines on loopback: two
setu-server replicas with no workers of their own, two setu-worker processes
deployed apart from them (one on each replica, holding only their worker
token, the cloud's secrets and the bucket's keys), S3 (moto) as the staging
blob, and an agent; a run in each of the four flows, submitted through one
replica and waited on through the other."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from tests.databases import postgres_config, scratch_database
from tests.e2e.test_edge_runs import fill, rows_of
from tests.factories import Tenant, make_tenant
from tests.s3server import S3Endpoint
from tests.servers import checked_in_agent, checked_in_runtime, server_process, wait_healthy

S = common_pb2
pytestmark = pytest.mark.slow

ROWS = 1_500
WORKER_TOKEN = secrets.token_urlsafe(24)


def worker(port: int, s3: S3Endpoint, log: Path) -> contextlib.AbstractAsyncContextManager[Any]:
    """A setu-worker as an operator deploys one: its own environment, built
    from nothing but what it needs."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SETU_SERVER": f"127.0.0.1:{port}",
        "SETU_WORKER_TOKEN": WORKER_TOKEN,
        "SETU_LOCAL_FILES_ROOT": "/",  # the test databases' sockets live in tmp folders
        "SETU_CLOUD_ALLOW_NETWORKS": "127.0.0.0/8",  # moto listens on loopback
        "SETU_BLOB_ACCESS_KEY_ID": s3.access_key_id,
        "SETU_BLOB_SECRET_ACCESS_KEY": s3.secret_access_key,
        "SETU_GRACE_SECONDS": "1",
    }
    return checked_in_runtime("setu_agent.cloud", env, log)


@contextlib.asynccontextmanager
async def replica(env: dict[str, str], log: Path) -> AsyncIterator[int]:
    with server_process(env, log) as (_, port):
        await wait_healthy(port)
        yield port


async def test_two_replicas_two_workers_and_an_agent_run_every_flow(
    database_url: str,
    pool: asyncpg.Pool,
    pg_server_url: str,
    s3_endpoint: S3Endpoint,
    tmp_path: Path,
) -> None:
    tenant: Tenant = await make_tenant(pool)
    bucket = await s3_endpoint.make_bucket()
    env = s3_endpoint.env | {
        "SETU_DATABASE_URL": database_url,
        "SETU_BLOB_URL": f"s3://{bucket}",
        "SETU_S3_ENDPOINT_URL": s3_endpoint.endpoint_url,
        "SETU_WORKER_PROCESSES": "0",
        "SETU_WORKER_TOKEN": WORKER_TOKEN,
        "SETU_LOG_FORMAT": "text",
    }
    async with (
        scratch_database(pg_server_url) as source,
        scratch_database(pg_server_url) as destination,
        replica(env, tmp_path / "server-a.log") as port_a,
        replica(env, tmp_path / "server-b.log") as port_b,
        worker(port_a, s3_endpoint, tmp_path / "worker-a.log"),
        worker(port_b, s3_endpoint, tmp_path / "worker-b.log"),
        checked_in_agent(port_b, tenant.agent_token, tmp_path / "agent.log", **s3_endpoint.env),
        SetuClient(f"127.0.0.1:{port_a}", tenant.api_key) as through_a,
        SetuClient(f"127.0.0.1:{port_b}", tenant.api_key) as through_b,
    ):
        await fill(source, "orders", ROWS)
        expected = await rows_of(source, "orders")
        agent = str(tenant.agent_id)
        ends = {
            "cloud": (
                await through_a.create_connection("src-c", "postgres", postgres_config(source)),
                await through_a.create_connection(
                    "dst-c", "postgres", postgres_config(destination)
                ),
            ),
            "agent": (
                await through_a.create_connection(
                    "src-a", "postgres", postgres_config(source), "agent", agent
                ),
                await through_a.create_connection(
                    "dst-a", "postgres", postgres_config(destination), "agent", agent
                ),
            ),
        }
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
                timeline = [e.message async for e in through_a.job_events(job.id)]
                assert done.state == S.JOB_STATE_SUCCEEDED, (table, done.error_message, timeline)
                where = {"cloud": "cloud", "agent": f"agent:{agent}"}
                assert (done.extract_runtime, done.load_runtime) == (
                    where[extract_at],
                    where[load_at],
                ), table
                assert await rows_of(destination, table) == expected, table
