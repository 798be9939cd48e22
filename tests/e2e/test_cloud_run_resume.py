"""A run whose server dies after staging resumes at load on the next
server, without reading the source again (real processes)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from tests.databases import postgres_config, scratch_database
from tests.factories import Tenant, make_tenant
from tests.servers import server_process, wait_healthy

S = common_pb2
ROWS = 3_000

pytestmark = pytest.mark.slow


async def test_a_run_killed_after_staging_resumes_at_load_without_its_source(
    database_url: str, pool: asyncpg.Pool, pg_server_url: str, tmp_path: Path
) -> None:
    tenant: Tenant = await make_tenant(pool)
    env = {
        "SETU_DATABASE_URL": database_url,
        "SETU_DATA_DIR": str(tmp_path / "server"),  # the blob folder both servers share
        "SETU_DIRECT_MAX_ROWS": "0",
        "SETU_BATCH_ROWS": "500",
        "SETU_LEASE_TTL_SECONDS": "2",  # the dead server's lease runs out soon
        "SETU_REAPER_INTERVAL_SECONDS": "0.2",
        "SETU_TASK_RETRY_BACKOFF_SECONDS": "0.05",
        "SETU_LOG_FORMAT": "text",
    }
    async with (
        scratch_database(pg_server_url) as source,
        scratch_database(pg_server_url) as destination,
    ):
        setup = await asyncpg.connect(source)
        await setup.execute(
            "CREATE TABLE events AS SELECT i AS id, md5(i::text) AS body "
            "FROM generate_series(1, $1) i",
            ROWS,
        )
        await setup.close()
        # The load blocks on this lock, so the server is surely killed in `load`.
        blocker = await asyncpg.connect(destination)
        await blocker.execute("CREATE TABLE events (id integer, body text)")
        lock = blocker.transaction()
        await lock.start()
        await blocker.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")

        with server_process(env, tmp_path / "first.log") as (first, port):
            await wait_healthy(port)
            async with SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client:
                src = await client.create_connection("src", "postgres", postgres_config(source))
                dst = await client.create_connection(
                    "dst", "postgres", postgres_config(destination)
                )
                pipeline = await client.create_pipeline("events", src.id, dst.id)
                job = await client.submit_run(pipeline.id)
                async for snapshot in client.watch_job(job.id):
                    if snapshot.phase == S.PHASE_LOAD:
                        break
            first.kill()
            first.wait()

        # The source is gone: a resumed run that read it again would fail.
        admin = await asyncpg.connect(pg_server_url)
        await admin.execute(f"DROP DATABASE {urlsplit(source).path.lstrip('/')} WITH (FORCE)")
        await admin.close()
        await lock.rollback()
        await blocker.close()

        with server_process(env, tmp_path / "second.log") as (_, port):
            await wait_healthy(port)
            async with SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client:
                await asyncio.wait_for(client.wait_for_job(job.id), 60)
                done = await client.get_job(job.id)
                events = [e.message async for e in client.job_events(job.id)]

        assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, events)
        assert sum("Staged" in m for m in events) == 1
        assert any("Resuming at load" in m for m in events)
        check = await asyncpg.connect(destination)
        try:
            rows = await check.fetch(
                "SELECT id, body = md5(id::text) AS ok FROM events ORDER BY id"
            )
        finally:
            await check.close()
        assert [r["id"] for r in rows] == list(range(1, ROWS + 1))
        assert all(r["ok"] for r in rows)
