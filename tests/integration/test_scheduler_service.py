"""The scheduler built alone on real PostgreSQL, its clock moved by hand: a
cron pipeline gets one run per tick, however many schedulers fire it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg

from setu_server.config import SchedulerSettings
from setu_server.maintenance.scheduler import Scheduler
from setu_server.models import Pipeline
from setu_server.store import runs
from setu_server.store.db import transaction
from tests.builders import START, Domain, build_domain
from tests.factories import make_pipeline, make_tenant

EVERY_MINUTE = "* * * * *"


async def setup(pool: asyncpg.Pool) -> tuple[Scheduler, Domain]:
    domain = build_domain(pool)
    return Scheduler(pool, domain.clock, domain.runs, SchedulerSettings(batch=10)), domain


async def scheduled(pool: asyncpg.Pool, pipeline: Pipeline) -> list[tuple[object, str]]:
    rows = await pool.fetch(
        "SELECT scheduled_for, state FROM job WHERE pipeline_id = $1 ORDER BY scheduled_for",
        pipeline.id,
    )
    return [(r["scheduled_for"], r["state"]) for r in rows]


async def next_run_at(pool: asyncpg.Pool, pipeline: Pipeline) -> object:
    return await pool.fetchval("SELECT next_run_at FROM pipeline WHERE id = $1", pipeline.id)


async def test_a_due_tick_gets_one_run_and_the_next_tick_is_set(pool: asyncpg.Pool) -> None:
    scheduler, domain = await setup(pool)
    tenant = await make_tenant(pool)
    tick = START + timedelta(minutes=1)
    pipeline = await make_pipeline(
        pool, tenant.workspace_id, schedule=EVERY_MINUTE, next_run_at=tick
    )

    assert (await scheduler.run_once()).created == [], "the tick has not come"
    domain.clock.advance(60)
    result = await scheduler.run_once()
    assert len(result.created) == 1 and result.already_fired == []
    assert await scheduled(pool, pipeline) == [(tick, "pending")]
    assert await next_run_at(pool, pipeline) == tick + timedelta(minutes=1)
    assert (await scheduler.run_once()).created == [], "a tick fires once"


async def test_schedulers_on_every_replica_fire_a_tick_once(pool: asyncpg.Pool) -> None:
    one, domain = await setup(pool)
    two = Scheduler(pool, domain.clock, build_domain(pool, domain.clock).runs)
    tenant = await make_tenant(pool)
    pipeline = await make_pipeline(
        pool, tenant.workspace_id, schedule=EVERY_MINUTE, next_run_at=START
    )

    results = await asyncio.gather(*(s.run_once() for s in (one, two, one, two)))
    assert sum(len(r.created) for r in results) == 1
    assert await scheduled(pool, pipeline) == [(START, "pending")]


async def test_missed_ticks_collapse_into_one_run_and_a_paused_schedule_fires_none(
    pool: asyncpg.Pool,
) -> None:
    scheduler, domain = await setup(pool)
    tenant = await make_tenant(pool)
    pipeline = await make_pipeline(
        pool, tenant.workspace_id, schedule="*/5 * * * *", next_run_at=START
    )
    paused = await make_pipeline(
        pool, tenant.workspace_id, schedule=EVERY_MINUTE, next_run_at=START, paused=True
    )
    domain.clock.advance(3600)  # twelve ticks pass while nobody fires

    assert len((await scheduler.run_once()).created) == 1
    assert await scheduled(pool, pipeline) == [(START, "pending")]
    assert await next_run_at(pool, pipeline) == START + timedelta(minutes=65)
    assert await scheduled(pool, paused) == []


async def test_a_tick_that_already_has_its_run_is_passed_over_and_moved_on(
    pool: asyncpg.Pool,
) -> None:
    scheduler, domain = await setup(pool)
    tenant = await make_tenant(pool)
    pipeline = await make_pipeline(
        pool, tenant.workspace_id, schedule=EVERY_MINUTE, next_run_at=START
    )
    snapshot = await runs.pipeline_for_run(pool, pipeline.id, tenant.workspace_id)
    assert snapshot is not None
    async with transaction(pool) as conn:  # another replica got there first
        await domain.runs.submit_scheduled(conn, snapshot, START)

    result = await scheduler.run_once()
    assert (result.created, result.already_fired) == ([], [pipeline.id])
    assert await scheduled(pool, pipeline) == [(START, "pending")]
    assert await next_run_at(pool, pipeline) == START + timedelta(minutes=1)
