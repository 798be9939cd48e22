"""Schedules: a cron pipeline gets one run per tick, however many replicas
fire, under a fast-forwarded clock."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from setu_client import SetuClient
from setu_client.clock import FakeClock
from setu_server.server import Running
from tests.factories import Tenant, make_tenant
from tests.servers import in_process

START = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
QUIET = {"worker_concurrency": 0, "scheduler_interval_seconds": 3600.0}


async def scheduled_runs(pool: asyncpg.Pool, pipeline_id: str) -> list[tuple[datetime, str]]:
    rows = await pool.fetch(
        "SELECT scheduled_for, state FROM job WHERE pipeline_id = $1 ORDER BY scheduled_for",
        pipeline_id,
    )
    return [(r["scheduled_for"], r["state"]) for r in rows]


async def pipeline(client: SetuClient, tmp: str, **fields: object) -> str:
    name = uuid.uuid4().hex[:8]
    src = await client.create_connection(f"src-{name}", "sqlite", {"path": f"{tmp}/a.db"})
    dst = await client.create_connection(f"dst-{name}", "sqlite", {"path": f"{tmp}/b.db"})
    created = await client.create_pipeline(name, src.id, dst.id, **fields)  # type: ignore[arg-type]
    return str(created.id)


async def fire_everywhere(*servers: Running) -> None:
    passes = [s.services.scheduler.run_once() for s in servers for _ in range(2)]
    await asyncio.gather(*passes)


async def test_two_replicas_create_exactly_one_run_per_tick(
    database_url: str, pool: asyncpg.Pool, tmp_path: object
) -> None:
    tenant: Tenant = await make_tenant(pool)
    clock = FakeClock(START)
    async with (
        in_process(database_url, clock, **QUIET) as one,
        in_process(database_url, clock, **QUIET) as two,
        SetuClient(f"127.0.0.1:{one.port}", tenant.api_key) as client,
    ):
        pipeline_id = await pipeline(client, str(tmp_path), schedule="* * * * *")
        await fire_everywhere(one, two)
        assert await scheduled_runs(pool, pipeline_id) == []  # the first tick is 12:01

        for _ in range(10):
            clock.advance(60)
            await fire_everywhere(one, two)

    first = START.replace(second=0) + timedelta(minutes=1)
    assert await scheduled_runs(pool, pipeline_id) == [
        (first + timedelta(minutes=i), "pending") for i in range(10)
    ]


async def test_missed_ticks_collapse_into_one_run_and_a_paused_schedule_fires_none(
    database_url: str, pool: asyncpg.Pool, tmp_path: object
) -> None:
    tenant: Tenant = await make_tenant(pool)
    clock = FakeClock(START)
    async with (
        in_process(database_url, clock, **QUIET) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        pipeline_id = await pipeline(client, str(tmp_path), schedule="*/5 * * * *")
        paused_id = await pipeline(client, f"{tmp_path}/p", schedule="* * * * *", paused=True)
        clock.advance(3600)  # twelve ticks pass while nobody fires
        await fire_everywhere(server)
        clock.advance(60)
        await fire_everywhere(server)
        got = await pool.fetchrow("SELECT next_run_at FROM pipeline WHERE id = $1", pipeline_id)

    assert await scheduled_runs(pool, pipeline_id) == [
        (START.replace(second=0) + timedelta(minutes=5), "pending")
    ]
    assert got["next_run_at"] == START.replace(second=0) + timedelta(minutes=65)
    assert await scheduled_runs(pool, paused_id) == []
