"""The reaper on real PostgreSQL, built alone, its clock moved by hand (SQL
takes "now" as a parameter, so a fake clock moves the database's idea of
time too)."""

from __future__ import annotations

import asyncpg

from setu_server.config import LeasePolicy, ReaperSettings
from setu_server.maintenance.reaper import Reaper
from setu_server.models import JobKind, JobState, TaskState
from setu_server.store import jobs, tasks
from tests.builders import Domain, build_domain
from tests.factories import Tenant, make_job, make_task, make_tenant

SETTINGS = ReaperSettings(batch=2)


async def setup(
    pool: asyncpg.Pool, retry_backoff_seconds: float = 10
) -> tuple[Reaper, Domain, Tenant]:
    policy = LeasePolicy(ttl_seconds=60, retry_backoff_seconds=retry_backoff_seconds)
    domain = build_domain(pool, policy=policy)
    reaper = Reaper(
        pool, domain.clock, domain.lifecycle, domain.outcomes, domain.tasks.policy, SETTINGS
    )
    return reaper, domain, await make_tenant(pool)


async def test_expired_leases_are_requeued_then_fail_the_job_when_attempts_are_spent(
    pool: asyncpg.Pool,
) -> None:
    reaper, domain, tenant = await setup(pool)
    clock, service = domain.clock, domain.tasks
    job = await make_job(pool, tenant.workspace_id, kind=JobKind.TEST)
    task = await make_task(pool, tenant, job=job, max_attempts=2, now=clock.now())
    runtime = str(tenant.agent_id)

    first = await service.lease(runtime, 0)
    assert first is not None and first.attempt == 1
    clock.advance(59)
    assert (await reaper.run_once()).reaped == 0, "the lease is still live"
    clock.advance(2)
    assert (await reaper.run_once()).requeued == [task.id]
    requeued = await tasks.get_task(pool, task.id)
    assert requeued is not None
    assert (requeued.state, requeued.attempt) == (TaskState.PENDING, 2)
    assert await service.lease(runtime, 0) is None, "backing off for 10 s"
    clock.advance(10)
    second = await service.lease(runtime, 0)
    assert second is not None and second.attempt == 2

    clock.advance(61)
    result = await reaper.run_once()
    assert (result.requeued, result.failed) == ([], [task.id])
    failed = await jobs.get_job(pool, job.id, tenant.workspace_id)
    assert failed is not None and failed.state is JobState.FAILED
    assert failed.error_message == (
        f"runtime test: lease expired 2 times: agent:{tenant.agent_id} "
        "stopped heartbeating; giving up"
    )


async def test_a_pass_reaps_every_expired_lease_a_batch_at_a_time_and_says_so(
    pool: asyncpg.Pool,
) -> None:
    reaper, domain, tenant = await setup(pool)
    made = [await make_task(pool, tenant, now=domain.clock.now()) for _ in range(5)]
    for _ in made:
        assert await domain.tasks.lease(str(tenant.agent_id), 0) is not None
    domain.clock.advance(61)

    result = await reaper.run_once()
    assert sorted(result.requeued) == sorted(t.id for t in made), "batches of 2 until none"
    assert result.failed == []
    events = await jobs.list_job_events(pool, made[0].job_id, after=0, limit=10)
    assert events[-1].message == (
        f"Lease of task test expired: agent:{tenant.agent_id} stopped heartbeating; "
        "requeued (attempt 2 of 3)"
    )


async def test_a_requeued_lease_backs_off_as_the_lease_policy_says(pool: asyncpg.Pool) -> None:
    # One setting paces both retries: a failed task's and an expired lease's.
    reaper, domain, tenant = await setup(pool, retry_backoff_seconds=40)
    task = await make_task(pool, tenant, now=domain.clock.now())
    runtime = str(tenant.agent_id)
    assert await domain.tasks.lease(runtime, 0) is not None
    domain.clock.advance(61)
    assert (await reaper.run_once()).requeued == [task.id]

    domain.clock.advance(39)
    assert await domain.tasks.lease(runtime, 0) is None, "the policy's 40 s, not a default"
    domain.clock.advance(1)
    again = await domain.tasks.lease(runtime, 0)
    assert again is not None and again.id == task.id
