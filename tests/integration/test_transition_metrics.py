"""Job transitions are counted once they are committed, by the process that
committed them: never for a rolled-back transaction, once however often the
snapshot is published, and not for snapshots that change no state."""

from __future__ import annotations

import gc
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from setu_engine.staged.blob import BlobSettings
from setu_server.maintenance.scheduler import Scheduler
from setu_server.metrics import Metrics
from setu_server.models import JobKind, JobState, Phase
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.runs import RunService
from setu_server.store import runs
from setu_server.store.db import transaction
from tests.builders import START, build_domain
from tests.factories import make_connection, make_job, make_pipeline, make_tenant


class RolledBack(Exception):
    pass


def counted(metrics: Metrics, state: str, kind: str = "test") -> float:
    value = metrics.registry.get_sample_value(
        "setu_job_transitions_total", {"kind": kind, "state": state}
    )
    return value or 0.0


def counting(pool: asyncpg.Pool) -> tuple[JobLifecycle, Metrics]:
    domain = build_domain(pool)
    metrics = Metrics(domain.clock, process=False)
    return JobLifecycle(pool, domain.hub, domain.clock, metrics), metrics


async def test_a_transition_on_the_pool_is_counted_at_once(pool: asyncpg.Pool) -> None:
    lifecycle, metrics = counting(pool)
    job = await make_job(pool, (await make_tenant(pool)).workspace_id, kind=JobKind.TEST)
    await lifecycle.transition(job.id, JobState.RUNNING, "Running")
    assert counted(metrics, "running") == 1


async def test_a_transition_in_a_transaction_counts_when_published_after_commit(
    pool: asyncpg.Pool,
) -> None:
    lifecycle, metrics = counting(pool)
    job = await make_job(pool, (await make_tenant(pool)).workspace_id, kind=JobKind.TEST)
    async with transaction(pool) as conn:
        moved = await lifecycle.transition(job.id, JobState.RUNNING, "Running", db=conn)
        assert counted(metrics, "running") == 0, "not committed yet"
    lifecycle.published([moved])
    lifecycle.published([moved])
    assert counted(metrics, "running") == 1, "once, however often it is published"


async def test_a_rolled_back_transition_is_never_counted(pool: asyncpg.Pool) -> None:
    lifecycle, metrics = counting(pool)
    job = await make_job(pool, (await make_tenant(pool)).workspace_id, kind=JobKind.TEST)
    with pytest.raises(RolledBack):
        async with transaction(pool) as conn:
            held = await lifecycle.transition(job.id, JobState.RUNNING, "Running", db=conn)
            assert lifecycle.unpublished == 1
            raise RolledBack
    del held
    gc.collect()
    assert lifecycle.unpublished == 0, "a dropped snapshot is not kept"
    # The same job moves for real afterwards: that one counts, once.
    async with transaction(pool) as conn:
        moved = await lifecycle.transition(job.id, JobState.RUNNING, "Running", db=conn)
    lifecycle.published([moved])
    assert counted(metrics, "running") == 1


async def test_a_snapshot_that_changes_no_state_is_not_counted(pool: asyncpg.Pool) -> None:
    lifecycle, metrics = counting(pool)
    job = await make_job(pool, (await make_tenant(pool)).workspace_id, kind=JobKind.TEST)
    await lifecycle.transition(job.id, JobState.RUNNING, "Running")
    phased = await runs.set_run_phase(pool, job.id, Phase.LOAD, "Loading", None)
    assert phased is not None and phased.state is JobState.RUNNING
    lifecycle.published([phased])
    assert counted(metrics, "running") == 1


async def test_a_scheduled_run_that_cannot_start_is_counted_after_the_schedulers_commit(
    pool: asyncpg.Pool,
) -> None:
    domain = build_domain(pool)
    metrics = Metrics(domain.clock, process=False)
    lifecycle = JobLifecycle(pool, domain.hub, domain.clock, metrics)
    service = RunService(pool, domain.clock, lifecycle, BlobSettings("local", str(Path("/x"))))
    scheduler = Scheduler(pool, domain.clock, service)
    tenant = await make_tenant(pool)
    # Its source sits on an agent never seen: the tick fails to start.
    edge = await make_connection(pool, tenant.workspace_id, agent_id=tenant.agent_id)
    tick = START + timedelta(minutes=1)
    await make_pipeline(
        pool, tenant.workspace_id, source=edge, schedule="* * * * *", next_run_at=tick
    )
    domain.clock.advance(60)
    assert len((await scheduler.run_once()).created) == 1
    assert counted(metrics, "failed", kind="run") == 1
