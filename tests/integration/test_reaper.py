"""The reaper on real PostgreSQL, its clock moved by hand (SQL takes "now" as a
parameter, so a fake clock moves the database's idea of time too)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg

from setu_client.clock import FakeClock
from setu_server.maintenance.reaper import Reaper
from setu_server.models import JobKind, JobState, TaskState
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.signals import TaskSignals
from setu_server.service.tasks import LeasePolicy, TaskService
from setu_server.service.watch import WatchHub
from setu_server.store import jobs, tasks
from tests.factories import make_task, make_tenant


async def test_expired_leases_are_requeued_then_fail_the_job_when_attempts_are_spent(
    pool: asyncpg.Pool,
) -> None:
    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    lifecycle = JobLifecycle(pool, WatchHub(lambda ids: jobs.get_jobs(pool, ids)), clock)
    policy = LeasePolicy(ttl_seconds=60, retry_backoff_seconds=10)
    service = TaskService(pool, clock, lifecycle, TaskSignals(), policy)
    reaper = Reaper(service)
    tenant = await make_tenant(pool)
    job = await jobs.insert_job(
        pool,
        id=uuid.uuid4(),
        workspace_id=tenant.workspace_id,
        kind=JobKind.TEST,
        state=JobState.PENDING,
        now=clock.now(),
    )
    task = await make_task(pool, tenant, job=job, max_attempts=2, now=clock.now())
    runtime = str(tenant.agent_id)

    first = await service.lease(runtime, 0)
    assert first is not None and first.attempt == 1
    clock.advance(59)
    assert await reaper.run_once() == 0, "the lease is still live"
    clock.advance(2)
    assert await reaper.run_once() == 1
    requeued = await tasks.get_task(pool, task.id)
    assert requeued is not None
    assert (requeued.state, requeued.attempt) == (TaskState.PENDING, 2)
    assert await service.lease(runtime, 0) is None, "backing off for 10 s"
    clock.advance(10)
    second = await service.lease(runtime, 0)
    assert second is not None and second.attempt == 2

    clock.advance(61)
    assert await reaper.run_once() == 1
    failed = await jobs.get_job(pool, job.id, tenant.workspace_id)
    assert failed is not None and failed.state is JobState.FAILED
    assert failed.error_message == (
        f"runtime test: lease expired 2 times: agent:{tenant.agent_id} "
        "stopped heartbeating; giving up"
    )
