"""CancelJob and LeaseTask take their locks in one order (a job before its
tasks), and what PostgreSQL still rolls back under contention (a deadlock,
a serialization failure) leaves the store as Unavailable, which callers
retry, never as INTERNAL. Interleavings are forced with held locks."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
from asyncpg.transaction import Transaction

from setu_client.errors import Unavailable
from setu_server.models import TaskState
from setu_server.store import jobs, tasks
from setu_server.store.db import translate_errors
from tests.factories import make_job, make_task, make_tenant


async def test_a_lessee_never_waits_on_a_job_that_a_cancel_holds(pool: asyncpg.Pool) -> None:
    tenant = await make_tenant(pool)
    task = await make_task(pool, tenant)
    runtime = str(tenant.agent_id)
    async with pool.acquire() as canceller, canceller.transaction():
        # CancelJob's first step: the job, locked; its pending tasks come next.
        assert await jobs.lock_job(canceller, task.job_id, tenant.workspace_id) is not None
        async with pool.acquire() as lessee, lessee.transaction():
            # Any lock wait fails at once: a lessee that took the task and
            # then waited for the job (the deadlock's other half) fails here.
            await lessee.execute("SET LOCAL lock_timeout = '10ms'")
            got = await tasks.lease_task(lessee, runtime, uuid.uuid4(), 60.0, None)
        assert got is None, "the task of a job busy elsewhere is passed over"
        # The cancel goes on: nobody holds the task it cancels.
        await tasks.cancel_pending_tasks(canceller, task.job_id, None)
    after = await tasks.get_task(pool, task.id)
    assert after is not None and after.state is TaskState.CANCELLED


async def test_once_the_job_is_free_its_task_is_leased(pool: asyncpg.Pool) -> None:
    tenant = await make_tenant(pool)
    task = await make_task(pool, tenant)
    got = await tasks.lease_task(pool, str(tenant.agent_id), uuid.uuid4(), 60.0, None)
    assert got is not None and got[0].id == task.id and got[0].state is TaskState.LEASED


async def test_a_deadlock_leaves_the_store_as_unavailable(pool: asyncpg.Pool) -> None:
    tenant = await make_tenant(pool)
    first = await make_job(pool, tenant.workspace_id)
    second = await make_job(pool, tenant.workspace_id)
    lock = "SELECT 1 FROM job WHERE id = $1 FOR UPDATE"
    async with pool.acquire() as one, pool.acquire() as two:
        one_tx, two_tx = one.transaction(), two.transaction()
        await one_tx.start()
        await two_tx.start()
        await one.execute(lock, first.id)
        await two.execute(lock, second.id)

        async def cross(conn: asyncpg.Connection, tx: Transaction, job_id: uuid.UUID) -> None:
            try:
                with translate_errors():
                    await conn.execute(lock, job_id)
            except Exception:
                await tx.rollback()  # frees the other side
                raise
            await tx.commit()

        # Each waits for the other's row: PostgreSQL aborts one of them.
        outcomes = await asyncio.gather(
            cross(one, one_tx, second.id), cross(two, two_tx, first.id), return_exceptions=True
        )
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(errors) == 1, outcomes
    assert isinstance(errors[0], Unavailable), repr(errors[0])
    assert isinstance(errors[0].__cause__, asyncpg.DeadlockDetectedError)
    assert "try again" in str(errors[0])
