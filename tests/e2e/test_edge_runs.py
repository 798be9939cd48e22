"""Runs and connection operations that touch an agent, with real processes: a
setu-server, two setu-agent processes A and B, PostgreSQL source and
destination databases, and S3 (moto) on loopback as the shared blob store.

The edge connections log in with secret references only the agents can
resolve (SETU_SECRET_*), so the server cannot open them even if it tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_client.clock import SystemClock
from setu_client.errors import AgentOffline
from setu_engine.staged.s3 import s3_client
from setu_server.service.admin import AdminService
from tests.databases import postgres_config, scratch_database
from tests.factories import Tenant, make_tenant
from tests.s3server import S3Endpoint
from tests.servers import checked_in_agent, server_process, wait_healthy

S = common_pb2
pytestmark = pytest.mark.slow

ROWS = 2_000
SECRET = f"pw-{uuid.uuid4().hex}"  # the edge databases' password: only agents know it
HIDDEN_HOST = f"/tmp/no-such-socket-dir-{uuid.uuid4().hex}"  # a secret host nobody listens on


@dataclass
class Edge:
    client: SetuClient
    server_log: Path
    logs: Path
    port: int
    tenant: Tenant
    agent_b: tuple[uuid.UUID, str]
    source: str
    destination: str
    bucket: str
    s3: S3Endpoint
    agent_env: dict[str, str]

    def edge_config(self, url: str) -> dict[str, Any]:
        """A connection only an agent can open: the user and password are
        secret references the server's store does not hold."""
        return postgres_config(url) | {
            "user": {"$secret": "PG_USER"},
            "password": {"$secret": "PG_PASSWORD"},
        }

    def agent(
        self, name: str, token: str, **env: str
    ) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
        """An agent process, once it has checked in."""
        log = self.logs / f"agent-{name}.log"
        return checked_in_agent(self.port, token, log, **(self.agent_env | env))


async def fill(url: str, table: str, rows: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            f"CREATE TABLE {table} AS SELECT i AS id, md5(i::text) AS body, i * 1.5 AS amount "
            f"FROM generate_series(1, $1) i",
            rows,
        )
        await conn.execute(f"ALTER TABLE {table} ADD PRIMARY KEY (id)")
    finally:
        await conn.close()


async def rows_of(url: str, table: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(f"SELECT * FROM {table} ORDER BY id")]
    finally:
        await conn.close()


@pytest.fixture
async def edge(
    database_url: str,
    pool: asyncpg.Pool,
    pg_server_url: str,
    s3_endpoint: S3Endpoint,
    tmp_path: Path,
) -> AsyncIterator[Edge]:
    tenant = await make_tenant(pool)
    second = await AdminService(pool, SystemClock()).create_agent(tenant.workspace_id, "agent b")
    bucket = await s3_endpoint.make_bucket()
    env = s3_endpoint.env | {
        "SETU_DATABASE_URL": database_url,
        "SETU_BLOB_URL": f"s3://{bucket}",
        "SETU_S3_ENDPOINT_URL": s3_endpoint.endpoint_url,
        "SETU_LEASE_TTL_SECONDS": "3",  # heartbeats every second
        "SETU_REAPER_INTERVAL_SECONDS": "0.5",
        "SETU_TASK_RETRY_BACKOFF_SECONDS": "0.05",
        "SETU_LOG_FORMAT": "text",
        "SETU_LOG_LEVEL": "debug",
    }
    agent_env = s3_endpoint.env | {
        "SETU_AGENT_EXTRA_HANDLERS": "",  # the real engine, not the test handlers
        "SETU_SECRET_PG_USER": "postgres",
        "SETU_SECRET_PG_PASSWORD": SECRET,
        "SETU_SECRET_HIDDEN_HOST": HIDDEN_HOST,
        "SETU_LOG_LEVEL": "debug",
    }
    async with (
        scratch_database(pg_server_url) as source,
        scratch_database(pg_server_url) as destination,
    ):
        await fill(source, "orders", ROWS)
        with server_process(env, tmp_path / "server.log") as (_, port):
            await wait_healthy(port)
            async with SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client:
                yield Edge(
                    client,
                    tmp_path / "server.log",
                    tmp_path,
                    port,
                    tenant,
                    (second.value.id, second.secret),
                    source,
                    destination,
                    bucket,
                    s3_endpoint,
                    agent_env,
                )


async def run(edge: Edge, source: Any, destination: Any, table: str, **fields: Any) -> Any:
    pipeline = await edge.client.create_pipeline(
        f"to-{table}",
        source.id,
        destination.id,
        streams=["orders"],
        spec={"destination": {"orders": table}},
        **fields,
    )
    job = await edge.client.submit_run(pipeline.id)
    await edge.client.wait_for_job(job.id)
    return await edge.client.get_job(job.id)


async def events(client: SetuClient, job_id: str) -> list[str]:
    return [e.message async for e in client.job_events(job_id)]


async def test_all_three_edge_flows_copy_the_data_and_the_secret_never_reaches_the_server(
    edge: Edge, database_url: str
) -> None:
    client, (b_id, b_token) = edge.client, edge.agent_b
    a, b = f"agent:{edge.tenant.agent_id}", f"agent:{b_id}"
    async with edge.agent("a", edge.tenant.agent_token), edge.agent("b", b_token):
        src_edge = await client.create_connection(
            "src-edge",
            "postgres",
            edge.edge_config(edge.source),
            "agent",
            str(edge.tenant.agent_id),
        )
        dst_edge = await client.create_connection(
            "dst-edge", "postgres", edge.edge_config(edge.destination), "agent", str(b_id)
        )
        src_cloud = await client.create_connection(
            "src-cloud", "postgres", postgres_config(edge.source)
        )
        dst_cloud = await client.create_connection(
            "dst-cloud", "postgres", postgres_config(edge.destination)
        )
        expected = await rows_of(edge.source, "orders")

        flows = {
            "a2c": (src_edge, dst_cloud, a, "cloud"),
            "c2a": (src_cloud, dst_edge, "cloud", b),
            "a2a": (src_edge, dst_edge, a, b),
        }
        answers = []
        for table, (source, destination, extract_at, load_at) in flows.items():
            job = await run(edge, source, destination, table)
            timeline = await events(client, job.id)
            assert job.state == S.JOB_STATE_SUCCEEDED, (table, job.error_message, timeline)
            assert await rows_of(edge.destination, table) == expected, table
            assert (job.extract_runtime, job.load_runtime) == (extract_at, load_at), table
            assert job.progress.rows_loaded == ROWS
            first = "extract" if extract_at != "cloud" else "migrate"
            # The timeline names the agents (the runtimes above keep their ids).
            said = {a: "agent test agent", b: "agent agent b", "cloud": "cloud"}
            assert f"Dispatched {first} to {said[extract_at]}" in timeline, timeline
            if load_at != "cloud":
                assert f"Dispatched load to {said[load_at]}" in timeline, timeline
                assert any(m.startswith(f"Load finished on {said[load_at]}") for m in timeline)
            if extract_at != "cloud":
                assert any(
                    m.startswith(f"Extract finished on {said[extract_at]}") for m in timeline
                )
            if (extract_at, load_at) == (a, "cloud"):
                assert "Loading staged data in the cloud" in timeline
            outputs = await client.job_outputs(job.id)
            assert [(o.rows_extracted, o.rows_loaded) for o in outputs.streams] == [(ROWS, ROWS)]
            # What the load did travels from wherever it ran (docs/flows.md).
            assert [(o.inserted, o.updated, o.unchanged) for o in outputs.streams] == [
                (ROWS, 0, 0)
            ], table
            answers += [str(job), "\n".join(timeline), str(outputs)]

        # The secret is nowhere the server keeps or says anything.
        answers += [str(await client.get_connection(c.id)) for c in (src_edge, dst_edge)]
        answers.append(edge.server_log.read_text())
        assert all(SECRET not in answer for answer in answers)
        assert SECRET not in await database_text(database_url)
        assert SECRET.encode() not in await blob_bytes(edge)


async def database_text(url: str) -> str:
    """Every row of every table of Setu's database, as text."""
    conn = await asyncpg.connect(url)
    try:
        tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        dumps = [
            await conn.fetchval(f"SELECT coalesce(string_agg(t::text, '\n'), '') FROM {r[0]} t")
            for r in tables
        ]
    finally:
        await conn.close()
    return "\n".join(dumps)


async def blob_bytes(edge: Edge) -> bytes:
    """Every staged object, decompressed where it is a part."""
    import zstandard

    out = b""
    async with s3_client(edge.s3.settings) as s3:
        listing = await s3.list_objects_v2(Bucket=edge.bucket)
        for item in listing.get("Contents", []):
            body = await (await s3.get_object(Bucket=edge.bucket, Key=item["Key"]))["Body"].read()
            out += (
                zstandard.ZstdDecompressor().decompress(body)
                if item["Key"].endswith(".zst")
                else body
            )
    assert out, "the runs staged something"
    return out


async def test_edge_test_discover_and_preview_answer_synchronously_and_fail_fast_offline(
    edge: Edge, pool: asyncpg.Pool
) -> None:
    client = edge.client
    async with edge.agent("a", edge.tenant.agent_token):
        conn = await client.create_connection(
            "src-edge",
            "postgres",
            edge.edge_config(edge.source),
            "agent",
            str(edge.tenant.agent_id),
        )
        tested = await client.test_connection(conn.id)
        assert tested.ok, tested.message
        assert tested.runtime == f"agent:{edge.tenant.agent_id}"
        assert tested.runtime_label == "agent test agent"
        assert "PostgreSQL" in tested.message

        found = await client.discover_streams(conn.id)
        assert [(s.name, s.status) for s in found.streams] == [("orders", S.CATALOG_STATUS_ACTIVE)]
        assert [c.name for c in found.streams[0].columns] == ["id", "body", "amount"]
        assert list(found.streams[0].primary_key) == ["id"]

        await fill(edge.source, "refunds", 3)
        setup = await asyncpg.connect(edge.source)
        await setup.execute("DROP TABLE orders")
        await setup.close()
        again = await client.discover_streams(conn.id)
        assert sorted((s.name, s.status) for s in again.streams) == [
            ("orders", S.CATALOG_STATUS_MISSING),
            ("refunds", S.CATALOG_STATUS_ACTIVE),
        ]

        preview = await client.preview_stream(conn.id, "refunds", limit=2)
        assert [dict(r) for r in preview.rows] == [
            {"id": 1, "body": "c4ca4238a0b923820dcc509a6f75849b", "amount": "1.5"},
            {"id": 2, "body": "c81e728d9d4c2f636f067f89cc14862c", "amount": "3.0"},
        ]

        # A failure quoting a resolved secret (here the host) reaches the
        # caller with the secret blanked out.
        hidden = await client.create_connection(
            "hidden",
            "postgres",
            edge.edge_config(edge.source) | {"host": {"$secret": "HIDDEN_HOST"}},
            "agent",
            str(edge.tenant.agent_id),
        )
        refused = await client.test_connection(hidden.id)
        assert not refused.ok
        assert "cannot connect to ***" in refused.message
        assert HIDDEN_HOST not in refused.message
        assert HIDDEN_HOST not in str(await client.get_job(refused.job_id))

        # A connection on an agent that never checked in fails at once.
        ghost = await AdminService(pool, SystemClock()).create_agent(edge.tenant.workspace_id, "c")
        offline = await client.create_connection(
            "ghost", "postgres", edge.edge_config(edge.source), "agent", str(ghost.value.id)
        )
        with pytest.raises(AgentOffline, match=r"agent c .* is offline \(never seen\): start it"):
            await client.test_connection(offline.id)


async def until_extracting(client: SetuClient, job_id: str) -> None:
    """Until the run's counts show rows extracted: the agent's heartbeats
    carry its progress, so the extract is surely under way."""
    async for snapshot in client.watch_job(job_id):
        if snapshot.progress.rows_extracted > 0:
            return
    raise AssertionError("the run ended before any extract progress showed")


async def staged_keys(edge: Edge) -> list[str]:
    async with s3_client(edge.s3.settings) as s3:
        listing = await s3.list_objects_v2(Bucket=edge.bucket)
    return [item["Key"] for item in listing.get("Contents", [])]


# Small batches make an edge extract of BIG rows take many S3 round trips:
# long enough to cancel it, or to kill its agent, midway.
BIG = 60_000
SLOW = {"SETU_AGENT_BATCH_ROWS": "100"}


async def test_cancel_during_an_edge_extract_stops_the_agent_and_ends_the_run_cancelled(
    edge: Edge,
) -> None:
    client = edge.client
    await fill(edge.source, "events", BIG)
    async with edge.agent("a", edge.tenant.agent_token, **SLOW):
        src = await client.create_connection(
            "src", "postgres", edge.edge_config(edge.source), "agent", str(edge.tenant.agent_id)
        )
        dst = await client.create_connection("dst", "postgres", postgres_config(edge.destination))
        pipeline = await client.create_pipeline("events", src.id, dst.id, streams=["events"])
        job = await client.submit_run(pipeline.id)
        # The agent's heartbeats carry its progress into the run's counts.
        async for snapshot in client.watch_job(job.id):
            if snapshot.progress.rows_extracted > 0:
                break
        await client.cancel_job(job.id, "wrong table")
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        timeline = await events(client, job.id)

    assert done.state == S.JOB_STATE_CANCELLED, timeline
    assert done.error_message == "cancelled: wrong table"
    assert not any(k.endswith("manifest.json") for k in await staged_keys(edge))
    assert any("Cancel requested" in m for m in timeline)
    conn = await asyncpg.connect(edge.destination)
    try:
        assert await conn.fetchval("SELECT to_regclass('events')") is None
    finally:
        await conn.close()


async def test_kill_9_of_the_extracting_agent_requeues_and_its_restart_finishes_once(
    edge: Edge,
) -> None:
    client = edge.client
    await fill(edge.source, "events", BIG)
    async with edge.agent("a", edge.tenant.agent_token, **SLOW) as first:
        src = await client.create_connection(
            "src", "postgres", edge.edge_config(edge.source), "agent", str(edge.tenant.agent_id)
        )
        dst = await client.create_connection("dst", "postgres", postgres_config(edge.destination))
        pipeline = await client.create_pipeline("events", src.id, dst.id, streams=["events"])
        job = await client.submit_run(pipeline.id)
        await until_extracting(client, job.id)
        first.kill()
        await first.wait()
    # Nobody else may run the extract: the kill surely landed midway.
    halfway = await client.get_job(job.id)
    assert halfway.progress.rows_extracted < BIG
    assert not any(m.startswith("Extract finished") for m in await events(client, job.id))
    async with edge.agent("a-again", edge.tenant.agent_token):
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        timeline = await events(client, job.id)

    assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
    assert any("stopped heartbeating; requeued (attempt 2 of 3)" in m for m in timeline)
    assert sum(m.startswith("Extract finished") for m in timeline) == 1
    assert await rows_of(edge.destination, "events") == await rows_of(edge.source, "events")


async def test_a_failing_edge_load_fails_the_run_and_the_other_stream_lands_once(
    edge: Edge,
) -> None:
    client, (b_id, b_token) = edge.client, edge.agent_b
    await fill(edge.source, "refunds", 5)
    await fill(edge.destination, "refunds", 0)
    conn = await asyncpg.connect(edge.destination)
    # refunds stays locked and the lock timeout is short: every load of it
    # fails with 55P03 (lock not available), a transient error, so retried.
    database = postgres_config(edge.destination)["database"]
    await conn.execute(f"ALTER DATABASE \"{database}\" SET lock_timeout = '50ms'")
    async with (
        edge.agent("a", edge.tenant.agent_token),
        edge.agent("b", b_token),
        contextlib.AsyncExitStack() as unlock,
    ):
        unlock.push_async_callback(conn.close)
        await conn.execute("BEGIN; LOCK TABLE refunds IN ACCESS EXCLUSIVE MODE")
        src = await client.create_connection(
            "src", "postgres", edge.edge_config(edge.source), "agent", str(edge.tenant.agent_id)
        )
        dst = await client.create_connection(
            "dst", "postgres", edge.edge_config(edge.destination), "agent", str(b_id)
        )
        pipeline = await client.create_pipeline(
            "both", src.id, dst.id, streams=["orders", "refunds"]
        )
        job = await client.submit_run(pipeline.id)
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        timeline = await events(client, job.id)

    assert done.state == S.JOB_STATE_FAILED, timeline
    assert done.error_message.startswith("runtime load: "), done.error_message
    assert "lock timeout" in done.error_message
    assert sum(m.startswith("Extract finished") for m in timeline) == 1
    assert any("(attempt 3 of 3)" in m for m in timeline)
    # Each stream loads in its own task: the failing one's retries never
    # append the other stream again.
    assert await rows_of(edge.destination, "orders") == await rows_of(edge.source, "orders")


async def test_an_empty_edge_stream_moves_zero_rows_and_succeeds(edge: Edge) -> None:
    client = edge.client
    setup = await asyncpg.connect(edge.source)
    await setup.execute("CREATE TABLE nothing (id bigint PRIMARY KEY, note text)")
    await setup.close()
    async with edge.agent("a", edge.tenant.agent_token):
        src = await client.create_connection(
            "src", "postgres", edge.edge_config(edge.source), "agent", str(edge.tenant.agent_id)
        )
        dst = await client.create_connection("dst", "postgres", postgres_config(edge.destination))
        pipeline = await client.create_pipeline("nothing", src.id, dst.id, streams=["nothing"])
        job = await client.submit_run(pipeline.id)
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        outputs = await client.job_outputs(job.id)

    assert done.state == S.JOB_STATE_SUCCEEDED, done.error_message
    assert [(o.stream, o.rows_extracted, o.rows_loaded) for o in outputs.streams] == [
        ("public.nothing", 0, 0)
    ]
    assert await rows_of(edge.destination, "nothing") == []
