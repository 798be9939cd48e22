"""Resumable loads with real processes (docs/flows.md, "Resumable loads"):
the process that loads a multi-part stream is killed (SIGKILL) between two
parts, once as the cloud worker (its supervisor starts it again) and once
as a setu-agent; the retry resumes at the first part without a marker, the
destination holds every row once under `append`, and the target held
nothing of the stream until the final apply.

The window is opened by a lock, never a sleep: a trigger on the markers
table makes the load's claim of part 4 wait for an advisory lock the test
holds, so the loader is surely between parts 3 and 4 when it is killed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_agent.engine.markers import MARKERS
from setu_agent.engine.providers.postgres import MARKERS_DDL
from setu_agent.engine.resumable import stage_table
from setu_client._proto.setu.v1 import common_pb2
from tests.databases import postgres_config
from tests.e2e.test_cloud_run_lifecycle import fetch
from tests.e2e.test_exactly_once import (
    FAST,
    REAL_ENGINE,
    ROWS,
    each_row_once,
    events,
    source_without_key,
)
from tests.factories import Tenant
from tests.servers import checked_in_agent

S = common_pb2
pytestmark = pytest.mark.slow

STREAM = "public.events"
HELD_PART = "part-00003"  # the fourth part: three are copied when the loader stops
LOCK = 7_340_001


async def destination_with_a_hold(url: str) -> None:
    """The target (no key: a row loaded twice shows) and the markers table,
    whose insert of HELD_PART waits for the test's advisory lock."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE events (id integer, body text);"
            + MARKERS_DDL.format(table=f"public.{MARKERS}")
            + ";"
            "CREATE FUNCTION hold_part() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.part = '{HELD_PART}' THEN PERFORM pg_advisory_xact_lock({LOCK}); END IF; "
            "RETURN NEW; END $$;"
            f"CREATE TRIGGER hold_part BEFORE INSERT ON {MARKERS} "
            "FOR EACH ROW EXECUTE FUNCTION hold_part()"
        )
    finally:
        await conn.close()


@asynccontextmanager
async def held(url: str) -> AsyncIterator[None]:
    """Holds the advisory lock; released (the load goes on) on exit."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", LOCK)
        yield
    finally:
        await conn.close()


async def wait_until_held(url: str) -> None:
    """Polls until a loader waits on the lock (bounded so a failure cannot
    hang the suite)."""
    query = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        f"AND objid = {LOCK}"
    )
    async with asyncio.timeout(60):
        # Polled: a lock wait in another session notifies nobody.
        while (await fetch(url, query))[0][0] == 0:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def before_the_kill(url: str, run_id: str) -> datetime:
    """What the destination holds while the loader waits at the fourth part:
    three parts in the staging table, each with its marker, and nothing of
    the stream in the target. Answers the database's time, to tell the
    parts the retry copied apart from these."""
    stage = stage_table(run_id, STREAM)
    parts = await fetch(
        url, f"SELECT part, rows FROM {MARKERS} WHERE run_id = '{run_id}' ORDER BY part"
    )
    assert [p for p, _ in parts] == ["part-00000", "part-00001", "part-00002"]
    staged = await fetch(url, f'SELECT count(*) FROM "{stage}"')
    assert staged == [(sum(rows for _, rows in parts),)]
    assert await fetch(url, "SELECT count(*) FROM events") == [(0,)]
    now = await fetch(url, "SELECT clock_timestamp()")
    stamp: datetime = now[0][0]
    return stamp


async def after_the_resume(url: str, run_id: str, killed_at: datetime, timeline: list[str]) -> None:
    """Every row once; the first three parts copied before the kill, every
    other one after it; the staging table gone."""
    await each_row_once(url)
    parts = await fetch(
        url,
        f"SELECT part, loaded_at FROM {MARKERS} WHERE run_id = '{run_id}' AND part <> '' "
        "ORDER BY part",
    )
    first = [p for p, at in parts if at < killed_at]
    assert first == ["part-00000", "part-00001", "part-00002"]
    assert len(parts) > 4
    whole = await fetch(url, f"SELECT rows FROM {MARKERS} WHERE run_id = '{run_id}' AND part = ''")
    assert whole == [(ROWS,)]
    stage = stage_table(run_id, STREAM)
    assert await fetch(url, f"SELECT to_regclass('public.\"{stage}\"')") == [(None,)]
    assert any(f"Resuming at part 4 of {len(parts)}" in m for m in timeline), timeline


async def test_a_cloud_worker_killed_between_parts_resumes_at_the_first_part_without_a_marker(
    client_for: Any, databases: tuple[str, str]
) -> None:
    source, destination = databases
    await source_without_key(source)
    await destination_with_a_hold(destination)
    server, client = await client_for(**FAST | {"resumable_load_min_bytes": 0})
    workers = server.services.workers
    assert workers is not None
    src = await client.create_connection("source", "postgres", postgres_config(source))
    dst = await client.create_connection("destination", "postgres", postgres_config(destination))
    pipeline = await client.create_pipeline("copy", src.id, dst.id, streams=["events"])
    async with held(destination):
        job = await client.submit_run(pipeline.id)
        await wait_until_held(destination)
        killed_at = await before_the_kill(destination, job.id)
        victim = await workers.process()
        victim.kill()
        await victim.wait()
        # Dead, and its supervisor starts another: still nothing in the target.
        assert await fetch(destination, "SELECT count(*) FROM events") == [(0,)]
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    timeline = await events(client, job.id)

    assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
    assert workers.started == 2
    await after_the_resume(destination, job.id, killed_at, timeline)


async def test_an_agent_killed_between_parts_resumes_at_the_first_part_without_a_marker(
    client_for: Any, databases: tuple[str, str], tenant: Tenant, tmp_path: Path
) -> None:
    source, destination = databases
    await source_without_key(source)
    await destination_with_a_hold(destination)
    server, client = await client_for(**FAST)
    env = REAL_ENGINE | {"SETU_AGENT_RESUMABLE_LOAD_MIN_BYTES": "0"}
    src = await client.create_connection("source", "postgres", postgres_config(source))
    dst = await client.create_connection(
        "destination", "postgres", postgres_config(destination), "agent", str(tenant.agent_id)
    )
    pipeline = await client.create_pipeline("copy", src.id, dst.id, streams=["events"])
    async with held(destination):
        async with checked_in_agent(
            server.port, tenant.agent_token, tmp_path / "agent-a.log", **env
        ) as first:
            job = await client.submit_run(pipeline.id)
            await wait_until_held(destination)
            killed_at = await before_the_kill(destination, job.id)
            first.kill()
            await first.wait()
        assert await fetch(destination, "SELECT count(*) FROM events") == [(0,)]
    async with checked_in_agent(server.port, tenant.agent_token, tmp_path / "agent-b.log", **env):
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        timeline = await events(client, job.id)

    assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
    assert any("stopped heartbeating; requeued" in m for m in timeline), timeline
    await after_the_resume(destination, job.id, killed_at, timeline)
