"""The task statements of setu_server/store/queries/tasks.sql, called directly on a real
database with a fake clock passed as "now": lease, heartbeat, complete,
fail and reap, without gRPC or services in between."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import asyncpg

from setu_client.clock import FakeClock
from setu_server.models import JobKind, JobState, Task, TaskKind, TaskState
from setu_server.store import jobs, tasks
from tests.factories import Tenant, make_job, make_task, make_tenant

START = datetime(2030, 1, 1, tzinfo=UTC)
TTL = 60.0
BACKOFF = 10.0
MAX_BACKOFF = 25.0


async def leased(
    pool: asyncpg.Pool, clock: FakeClock, runtime: str, token: uuid.UUID | None = None
) -> Task:
    got = await tasks.lease_task(pool, runtime, token or uuid.uuid4(), TTL, clock.now())
    assert got is not None, "a task was due"
    return got[0]


async def row(pool: asyncpg.Pool, task_id: uuid.UUID) -> Task:
    found = await tasks.get_task(pool, task_id)
    assert found is not None
    return found


async def setup(pool: asyncpg.Pool) -> tuple[Tenant, FakeClock, str]:
    return await make_tenant(pool), FakeClock(START), "cloud"


# -- lease_task


async def test_lease_takes_the_oldest_eligible_task_of_its_runtime_only(
    pool: asyncpg.Pool,
) -> None:
    tenant, clock, cloud = await setup(pool)
    agent = str(tenant.agent_id)
    first = await make_task(pool, tenant, cloud=True, now=clock.now())
    await make_task(pool, tenant, cloud=False, now=clock.now() - timedelta(seconds=5))
    second = await make_task(pool, tenant, cloud=True, now=clock.now() + timedelta(seconds=1))
    clock.advance(2)

    token = uuid.uuid4()
    got = await tasks.lease_task(pool, cloud, token, TTL, clock.now())
    assert got is not None
    task, moved = got
    assert task.id == first.id, "the oldest of the cloud queue, not the agent's older task"
    assert (task.state, task.lease_token) == (TaskState.LEASED, token)
    assert task.lease_expires_at == clock.now() + timedelta(seconds=TTL)
    assert moved is not None and moved.state is JobState.RUNNING and moved.id == first.job_id

    assert (await leased(pool, clock, cloud)).id == second.id
    assert await tasks.lease_task(pool, cloud, uuid.uuid4(), TTL, clock.now()) is None
    assert (await leased(pool, clock, agent)).runtime == agent


async def test_lease_waits_for_run_after_and_leaves_a_running_job_where_it_is(
    pool: asyncpg.Pool,
) -> None:
    tenant, clock, cloud = await setup(pool)
    job = await make_job(pool, tenant.workspace_id, kind=JobKind.RUN)
    await make_task(pool, tenant, job=job, cloud=True, now=clock.now() + timedelta(seconds=30))
    assert await tasks.lease_task(pool, cloud, uuid.uuid4(), TTL, clock.now()) is None
    assert await tasks.seconds_to_next_eligible(pool, cloud, clock.now()) == 30.0

    clock.advance(30)
    await leased(pool, clock, cloud)
    running = await jobs.get_job(pool, job.id, tenant.workspace_id)
    await make_task(pool, tenant, job=job, cloud=True, now=clock.now())
    got = await tasks.lease_task(pool, cloud, uuid.uuid4(), TTL, clock.now())
    assert got is not None and got[1] is None, "the job was already running"
    events = await jobs.list_job_events(pool, job.id, after=0, limit=10)
    # A job is transitioned when its state changes: the second lease of a
    # running job writes no event and bumps no version (so notifies nobody).
    assert [e.message.startswith("Task test leased by cloud") for e in events] == [True]
    again = await jobs.get_job(pool, job.id, tenant.workspace_id)
    assert running is not None and again is not None and again.version == running.version


async def test_lease_tasks_takes_up_to_as_many_as_tokens_oldest_first(
    pool: asyncpg.Pool,
) -> None:
    tenant, clock, cloud = await setup(pool)
    job = await make_job(pool, tenant.workspace_id, kind=JobKind.RUN)
    made = []
    for _ in range(3):
        made.append(await make_task(pool, tenant, job=job, cloud=True, now=clock.now()))
        clock.advance(1)
    tokens = [uuid.uuid4(), uuid.uuid4()]
    got = await tasks.lease_tasks(pool, cloud, tokens, TTL, clock.now())
    assert [t.id for t, _ in got] == [m.id for m in made[:2]], "two, the oldest first"
    assert [t.lease_token for t, _ in got] == tokens, "each its own token"
    assert [m is not None for _, m in got] == [True, True], "both name the job they moved"
    events = await jobs.list_job_events(pool, job.id, after=0, limit=10)
    assert len(events) == 1, "one transition for the job, not one per task"
    rest = await tasks.lease_tasks(pool, cloud, [uuid.uuid4() for _ in range(5)], TTL, clock.now())
    assert [t.id for t, m in rest] == [made[2].id] and rest[0][1] is None


async def test_concurrent_leases_never_take_the_same_task(pool: asyncpg.Pool) -> None:
    tenant, clock, cloud = await setup(pool)
    made = [await make_task(pool, tenant, cloud=True, now=clock.now()) for _ in range(3)]
    got = await asyncio.gather(
        *(tasks.lease_task(pool, cloud, uuid.uuid4(), TTL, clock.now()) for _ in range(4))
    )
    ids = [g[0].id for g in got if g is not None]
    assert sorted(ids) == sorted(t.id for t in made)


# -- heartbeat_task


async def test_heartbeat_extends_a_live_lease_and_answers_cancel(pool: asyncpg.Pool) -> None:
    tenant, clock, cloud = await setup(pool)
    await make_task(pool, tenant, cloud=True, now=clock.now())
    task = await leased(pool, clock, cloud)
    assert task.lease_token is not None
    clock.advance(50)

    beat = await tasks.heartbeat_task(
        pool, task.id, cloud, task.lease_token, TTL, {"step": 1}, clock.now()
    )
    assert beat == (clock.now() + timedelta(seconds=TTL), False)
    assert (await row(pool, task.id)).progress == {"step": 1}

    await jobs.request_job_cancel(pool, task.job_id, "stop", clock.now())
    beat = await tasks.heartbeat_task(
        pool, task.id, cloud, task.lease_token, TTL, None, clock.now()
    )
    assert beat is not None and beat[1] is True


async def test_heartbeat_refuses_a_wrong_token_and_an_expired_lease(pool: asyncpg.Pool) -> None:
    tenant, clock, cloud = await setup(pool)
    await make_task(pool, tenant, cloud=True, now=clock.now())
    task = await leased(pool, clock, cloud)
    assert task.lease_token is not None
    assert (
        await tasks.heartbeat_task(pool, task.id, cloud, uuid.uuid4(), TTL, None, clock.now())
        is None
    )

    clock.advance(TTL)
    beat = await tasks.heartbeat_task(
        pool, task.id, cloud, task.lease_token, TTL, None, clock.now()
    )
    assert beat is None, "the lease ran out"
    assert (await row(pool, task.id)).lease_expires_at == START + timedelta(seconds=TTL)


async def test_an_extracts_heartbeat_becomes_its_runs_count(pool: asyncpg.Pool) -> None:
    tenant, clock, cloud = await setup(pool)
    job = await make_job(pool, tenant.workspace_id, kind=JobKind.RUN)
    await make_task(pool, tenant, job=job, cloud=True, kind=TaskKind.EXTRACT, now=clock.now())
    task = await leased(pool, clock, cloud)
    assert task.lease_token is not None
    before = await jobs.get_job_any(pool, job.id)

    await tasks.heartbeat_task(
        pool, task.id, cloud, task.lease_token, TTL, {"rows_read": 1234}, clock.now()
    )
    after = await jobs.get_job_any(pool, job.id)
    assert before is not None and after is not None
    assert (after.rows_extracted, after.version) == (1234, before.version + 1)


# -- complete_task and complete_task_and_job


async def test_complete_succeeds_once_and_only_with_the_live_token(pool: asyncpg.Pool) -> None:
    tenant, clock, cloud = await setup(pool)
    await make_task(pool, tenant, cloud=True, now=clock.now())
    task = await leased(pool, clock, cloud)
    assert task.lease_token is not None
    clock.advance(5)

    assert await tasks.complete_task(pool, task.id, cloud, uuid.uuid4(), {}, clock.now()) is None
    done = await tasks.complete_task(pool, task.id, cloud, task.lease_token, {"n": 1}, clock.now())
    assert done is not None
    assert (done.state, done.result, done.finished_at) == (
        TaskState.SUCCEEDED,
        {"n": 1},
        clock.now(),
    )
    again = await tasks.complete_task(pool, task.id, cloud, task.lease_token, {}, clock.now())
    assert again is None, "a completion is accepted once"


async def test_complete_after_the_lease_ran_out_is_refused(pool: asyncpg.Pool) -> None:
    tenant, clock, cloud = await setup(pool)
    await make_task(pool, tenant, cloud=True, now=clock.now())
    task = await leased(pool, clock, cloud)
    assert task.lease_token is not None
    clock.advance(TTL)
    assert (
        await tasks.complete_task(pool, task.id, cloud, task.lease_token, {}, clock.now()) is None
    )
    assert (await row(pool, task.id)).state is TaskState.LEASED


async def test_complete_and_end_job_checks_the_kind_and_ends_the_job(pool: asyncpg.Pool) -> None:
    tenant, clock, cloud = await setup(pool)
    await make_task(pool, tenant, cloud=True, now=clock.now(), kind=TaskKind.DISCOVER)
    task = await leased(pool, clock, cloud)
    assert task.lease_token is not None
    token = task.lease_token

    assert (
        await tasks.complete_task_and_job(pool, task.id, cloud, token, {}, clock.now(), "test")
        is None
    )
    assert (
        await tasks.complete_task_and_job(pool, task.id, cloud, token, {}, clock.now()) is None
    ), "no kind said: only test and preview end their job"
    got = await tasks.complete_task_and_job(
        pool, task.id, cloud, token, {"streams": []}, clock.now(), "discover"
    )
    assert got is not None
    done, job = got
    assert done.state is TaskState.SUCCEEDED
    assert job is not None and (job.state, job.result) == (JobState.SUCCEEDED, {"streams": []})


# -- fail_task


async def fail(
    pool: asyncpg.Pool, clock: FakeClock, task: Task, *, retryable: bool = True
) -> Task | None:
    assert task.lease_token is not None
    return await tasks.fail_task(
        pool,
        task.id,
        task.runtime,
        task.lease_token,
        "boom",
        backoff_seconds=BACKOFF,
        max_backoff=MAX_BACKOFF,
        retryable=retryable,
        now=clock.now(),
    )


async def test_a_retryable_failure_requeues_with_a_doubling_capped_backoff(
    pool: asyncpg.Pool,
) -> None:
    tenant, clock, cloud = await setup(pool)
    await make_task(pool, tenant, cloud=True, now=clock.now(), max_attempts=4)
    delays = []
    for attempt in (1, 2, 3):
        task = await leased(pool, clock, cloud)
        assert task.attempt == attempt
        failed = await fail(pool, clock, task)
        assert failed is not None
        assert (failed.state, failed.attempt, failed.error_message) == (
            TaskState.PENDING,
            attempt + 1,
            "boom",
        )
        assert failed.lease_expires_at is None and failed.finished_at is None
        delays.append((failed.run_after - clock.now()).total_seconds())
        clock.advance(MAX_BACKOFF)
    assert delays == [10.0, 20.0, 25.0]

    last = await fail(pool, clock, await leased(pool, clock, cloud))
    assert last is not None and last.state is TaskState.FAILED, "attempts are spent"
    assert (last.attempt, last.finished_at) == (4, clock.now())


async def test_a_failure_does_not_retry_when_permanent_or_the_job_asked_to_stop(
    pool: asyncpg.Pool,
) -> None:
    tenant, clock, cloud = await setup(pool)
    await make_task(pool, tenant, cloud=True, now=clock.now())
    permanent = await fail(pool, clock, await leased(pool, clock, cloud), retryable=False)
    assert permanent is not None and permanent.state is TaskState.FAILED

    await make_task(pool, tenant, cloud=True, now=clock.now())
    task = await leased(pool, clock, cloud)
    await jobs.request_job_cancel(pool, task.job_id, "stop", clock.now())
    stopped = await fail(pool, clock, task)
    assert stopped is not None and stopped.state is TaskState.FAILED


async def test_a_failure_needs_the_live_token(pool: asyncpg.Pool) -> None:
    tenant, clock, cloud = await setup(pool)
    await make_task(pool, tenant, cloud=True, now=clock.now())
    task = await leased(pool, clock, cloud)
    assert await fail(pool, clock, replace(task, lease_token=uuid.uuid4())) is None
    clock.advance(TTL)
    assert await fail(pool, clock, task) is None, "the lease ran out"


# -- reap_expired_leases


async def reap(pool: asyncpg.Pool, clock: FakeClock, batch: int = 100) -> list[Task]:
    return await tasks.reap_expired_leases(
        pool, batch=batch, backoff_seconds=BACKOFF, max_backoff=MAX_BACKOFF, now=clock.now()
    )


async def test_reap_requeues_expired_leases_and_fails_the_last_attempt(
    pool: asyncpg.Pool,
) -> None:
    tenant, clock, cloud = await setup(pool)
    made = await make_task(pool, tenant, cloud=True, now=clock.now(), max_attempts=2)
    await leased(pool, clock, cloud)
    clock.advance(TTL - 1)
    assert await reap(pool, clock) == [], "the lease is still live"

    clock.advance(1)
    (requeued,) = await reap(pool, clock)
    assert (requeued.id, requeued.state, requeued.attempt) == (made.id, TaskState.PENDING, 2)
    assert requeued.run_after == clock.now() + timedelta(seconds=BACKOFF)
    assert requeued.lease_expires_at is None
    assert requeued.error_message == "lease expired: the runtime stopped heartbeating"

    clock.advance(BACKOFF)
    await leased(pool, clock, cloud)
    clock.advance(TTL)
    (spent,) = await reap(pool, clock)
    assert (spent.state, spent.attempt, spent.finished_at) == (TaskState.FAILED, 2, clock.now())
    assert await reap(pool, clock) == []


async def test_reap_takes_a_batch_at_a_time_and_fails_a_stopped_jobs_task(
    pool: asyncpg.Pool,
) -> None:
    tenant, clock, cloud = await setup(pool)
    for _ in range(3):
        await make_task(pool, tenant, cloud=True, now=clock.now())
    held = [await leased(pool, clock, cloud) for _ in range(3)]
    await jobs.request_job_cancel(pool, held[0].job_id, "stop", clock.now())
    clock.advance(TTL)

    first = await reap(pool, clock, batch=2)
    rest = await reap(pool, clock, batch=2)
    assert len(first) == 2 and len(rest) == 1
    states = {t.id: t.state for t in first + rest}
    assert states == {
        held[0].id: TaskState.FAILED,
        held[1].id: TaskState.PENDING,
        held[2].id: TaskState.PENDING,
    }
