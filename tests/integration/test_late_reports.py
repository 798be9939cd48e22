"""A report with the token of a lease that lapsed is refused, whatever the
reaper made of the task; a repeat of a report that landed is answered as it
was (setu_server/service/tasks.py, the reaper's statement in tasks.sql;
issue 23, audit item 4)."""

from __future__ import annotations

import asyncpg
import pytest

from setu_client.errors import LeaseLost
from setu_server.models import TaskState
from setu_server.store import tasks
from tests.factories import make_task
from tests.integration.test_reaper import setup

LAPSED = "lease expired: the runtime stopped heartbeating"


@pytest.mark.parametrize("max_attempts", [3, 1], ids=["requeued", "failed"])
async def test_a_late_failure_report_after_the_reaper_took_the_task_is_refused(
    pool: asyncpg.Pool, max_attempts: int
) -> None:
    reaper, domain, tenant = await setup(pool)
    runtime = str(tenant.agent_id)
    task = await make_task(pool, tenant, max_attempts=max_attempts, now=domain.clock.now())
    late = await domain.tasks.lease(runtime, 0)
    assert late is not None and late.lease_token is not None
    domain.clock.advance(61)
    reaped = await reaper.run_once()
    assert reaped.reaped == 1

    with pytest.raises(LeaseLost):
        await domain.tasks.fail(runtime, task.id, late.lease_token, "boom", True)
    after = await tasks.get_task(pool, task.id)
    assert after is not None and after.error_message == LAPSED, "the late error is not taken"
    wanted = TaskState.PENDING if max_attempts > 1 else TaskState.FAILED
    assert after.state is wanted


@pytest.mark.parametrize("retryable", [True, False])
async def test_a_repeated_failure_report_is_answered_as_the_first(
    pool: asyncpg.Pool, retryable: bool
) -> None:
    _, domain, tenant = await setup(pool)
    runtime = str(tenant.agent_id)
    task = await make_task(pool, tenant, now=domain.clock.now())
    leased = await domain.tasks.lease(runtime, 0)
    assert leased is not None and leased.lease_token is not None

    first = await domain.tasks.fail(runtime, task.id, leased.lease_token, "boom", retryable)
    again = await domain.tasks.fail(runtime, task.id, leased.lease_token, "boom", retryable)
    assert first == again == retryable, "will run again only when retryable"
    after = await tasks.get_task(pool, task.id)
    assert (
        after is not None and after.error_message == "boom" and after.attempt == 2 - (not retryable)
    )
