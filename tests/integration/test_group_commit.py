"""Group commit (setu_server/store/group_commit.py): concurrent leases and
completions of one server process share one transaction, yet each caller
gets its own tasks, and its own error. Batches are formed with the group's
test hooks (the drain waits until the callers have queued), never by luck."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from setu_client.errors import FailedPrecondition, InvalidArgument, LeaseLost
from setu_server.models import JobKind, JobState, Task, TaskKind, TaskState
from setu_server.service.tasks import TaskService
from setu_server.store import jobs, tasks
from setu_server.store.completer import Completion
from setu_server.store.db import Executor
from setu_server.store.group_commit import GroupCommit, Merge
from setu_tasks.results import TestResult
from tests.builders import build_domain
from tests.factories import Tenant, make_job, make_task, make_tenant


@contextlib.asynccontextmanager
async def batch_of(group: GroupCommit[Any], size: int) -> AsyncIterator[list[int]]:
    """Holds the next batch until `size` callers have queued; yields the
    sizes of the batches taken (what `draining` saw)."""
    queued = asyncio.Event()
    taken: list[int] = []

    async def on_queued(length: int) -> None:
        if length >= size:
            queued.set()

    async def on_draining(length: int) -> None:
        await queued.wait()
        taken.append(length)

    group.hooks.queued = on_queued
    group.hooks.draining = on_draining
    yield taken


async def _service(pool: asyncpg.Pool) -> tuple[TaskService, Tenant, str]:
    tenant = await make_tenant(pool)
    return build_domain(pool).tasks, tenant, str(tenant.agent_id)


async def _xmin(pool: asyncpg.Pool, ids: list[uuid.UUID]) -> set[str]:
    rows = await pool.fetch("SELECT xmin::text AS x FROM task WHERE id = ANY($1::uuid[])", ids)
    return {r["x"] for r in rows}


async def _state(pool: asyncpg.Pool, task: Task) -> TaskState:
    now = await tasks.get_task(pool, task.id)
    assert now is not None
    return now.state


async def test_two_concurrent_leases_share_one_transaction_yet_get_distinct_tasks(
    pool: asyncpg.Pool,
) -> None:
    service, tenant, runtime = await _service(pool)
    for _ in range(3):
        await make_task(pool, tenant)
    async with batch_of(service.group, 2) as taken:
        first, second = await asyncio.gather(
            service.lease_many(runtime, 0, 1), service.lease_many(runtime, 0, 1)
        )
    assert taken == [2], "both leases in one batch"
    assert len(first) == len(second) == 1
    assert first[0].id != second[0].id, "one statement, yet a task each"
    assert first[0].lease_token != second[0].lease_token
    assert len(await _xmin(pool, [first[0].id, second[0].id])) == 1, "one transaction"
    left = await pool.fetchval("SELECT count(*) FROM task WHERE state = 'pending'")
    assert left == 1


async def test_a_failing_completion_rolls_back_alone_and_fails_only_its_caller(
    pool: asyncpg.Pool,
) -> None:
    service, tenant, runtime = await _service(pool)
    good = await make_task(pool, tenant)
    discover = await make_job(pool, tenant.workspace_id, kind=JobKind.DISCOVER)
    bad = await make_task(pool, tenant, job=discover, kind=TaskKind.DISCOVER)
    held = {t.id: t for t in await service.lease_many(runtime, 0, 2)}
    assert set(held) == {good.id, bad.id}

    def complete(task: Task, result: TestResult) -> Awaitable[Task | None]:
        token = held[task.id].lease_token
        assert token is not None
        return service.complete(runtime, task.id, token, result)

    async with batch_of(service.group, 2) as taken:
        answers = await asyncio.gather(
            # A test result for a discover task: its completion runs, then
            # is refused (the kinds differ) and must roll back.
            complete(bad, TestResult(ok=False, message="")),
            complete(good, TestResult(ok=True, message="")),
            return_exceptions=True,
        )
    assert taken == [2]
    assert isinstance(answers[0], InvalidArgument)
    assert answers[1] is None, "the other completion succeeded"
    assert await _state(pool, good) is TaskState.SUCCEEDED
    assert await _state(pool, bad) is TaskState.LEASED, "the refused part rolled back"
    job = await jobs.get_job(pool, good.job_id, tenant.workspace_id)
    assert job is not None and job.state is JobState.SUCCEEDED


async def test_a_database_error_in_one_part_leaves_the_others_committed(
    pool: asyncpg.Pool,
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)

    async def no_lease(db: Executor, runtime: str, count: int) -> list[Any]:
        return []

    group: GroupCommit[Any] = GroupCommit(pool, no_lease)

    def event(message: str, *, then_fail: bool) -> Callable[[Executor], Awaitable[None]]:
        async def part(db: Executor) -> None:
            await jobs.insert_job_event(db, job.id, message, now=None)
            if then_fail:  # a job that does not exist: the database refuses
                await jobs.insert_job_event(db, uuid.uuid4(), "nowhere", now=None)

        return part

    async with batch_of(group, 3) as taken:
        answers = await asyncio.gather(
            group.run(event("first", then_fail=False)),
            group.run(event("doomed", then_fail=True)),
            group.run(event("third", then_fail=False)),
            return_exceptions=True,
        )
    assert taken == [3]
    assert isinstance(answers[1], FailedPrecondition), answers[1]
    assert answers[0] == (None, []) and answers[2] == (None, [])
    said = [e.message for e in await jobs.list_job_events(pool, job.id, after=0, limit=10)]
    assert said == ["first", "third"], "the failed part's own event rolled back with it"


async def test_a_refused_eager_completion_leases_nothing_beside_a_lease(
    pool: asyncpg.Pool,
) -> None:
    service, tenant, runtime = await _service(pool)
    held = await make_task(pool, tenant)
    (leased,) = await service.lease_many(runtime, 0, 1)
    assert leased.id == held.id
    waiting = [await make_task(pool, tenant) for _ in range(2)]
    async with batch_of(service.group, 2) as taken:
        answers = await asyncio.gather(
            service.complete(
                runtime, held.id, uuid.uuid4(), TestResult(ok=True, message=""), lease_next=True
            ),
            service.lease_many(runtime, 0, 1),
            return_exceptions=True,
        )
    assert taken == [2]
    assert isinstance(answers[0], LeaseLost), "a wrong token: refused"
    got = answers[1]
    assert isinstance(got, list) and [t.id for t in got] == [waiting[0].id]
    assert await _state(pool, waiting[1]) is TaskState.PENDING, "nothing leased for the refusal"


async def test_the_same_completion_twice_in_one_batch_is_accepted_once(
    pool: asyncpg.Pool,
) -> None:
    service, tenant, runtime = await _service(pool)
    await make_task(pool, tenant)
    (task,) = await service.lease_many(runtime, 0, 1)
    assert task.lease_token is not None
    async with batch_of(service.group, 2) as taken:
        answers = await asyncio.gather(
            *(
                service.complete(runtime, task.id, task.lease_token, TestResult(True, ""))
                for _ in range(2)
            )
        )
    assert taken == [2] and answers == [None, None], "both answered OK"
    said = [e.message for e in await jobs.list_job_events(pool, task.job_id, after=0, limit=10)]
    assert sum("succeeded" in m for m in said) == 1, said


async def test_a_caller_gone_before_its_batch_leases_nothing(pool: asyncpg.Pool) -> None:
    service, tenant, runtime = await _service(pool)
    made = await make_task(pool, tenant)
    queued, release = asyncio.Event(), asyncio.Event()

    async def on_queued(length: int) -> None:
        queued.set()

    async def on_draining(length: int) -> None:
        await release.wait()

    service.group.hooks.queued = on_queued
    service.group.hooks.draining = on_draining
    gone = asyncio.create_task(service.lease_many(runtime, 0, 1))
    await queued.wait()
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    release.set()
    # The next caller runs after the skipped one, in a later batch or the same.
    got = await service.lease_many(runtime, 0, 1)
    assert [t.id for t in got] == [made.id], "the task went to a caller still there"


# -- set-based transitions and merged completions (migration 0010)


@contextlib.asynccontextmanager
async def _listening(pool: asyncpg.Pool) -> AsyncIterator[tuple[asyncpg.Connection, list[str]]]:
    """A connection listening on `setu_job`, and the payloads it heard."""
    heard: list[str] = []

    def hear(*args: Any) -> None:
        heard.append(args[3])

    async with pool.acquire() as conn:
        await conn.add_listener("setu_job", hear)
        try:
            yield conn, heard
        finally:
            await conn.remove_listener("setu_job", hear)


async def _heard_all(conn: asyncpg.Connection, heard: list[str], count: int) -> list[str]:
    """The notices, once `count` arrived (polled on the connection, with a deadline)."""
    async with asyncio.timeout(10):
        while len(heard) < count:
            await conn.execute("SELECT 1")  # lets asyncpg read pending notifications
            await asyncio.sleep(0)
    return heard


async def test_one_lease_moves_each_job_with_its_own_event_version_and_notice(
    pool: asyncpg.Pool,
) -> None:
    service, tenant, runtime = await _service(pool)
    kinds = [TaskKind.TEST, TaskKind.PREVIEW, TaskKind.DISCOVER]
    made = {}
    for kind in kinds:
        made_job = await make_job(pool, tenant.workspace_id, kind=JobKind(kind.value))
        made[made_job.id] = await make_task(pool, tenant, job=made_job, kind=kind)
    async with _listening(pool) as (conn, heard):
        leased = await service.lease_many(runtime, 0, 3)
        assert {t.id for t in leased} == {t.id for t in made.values()}
        notices = [json.loads(n) for n in await _heard_all(conn, heard, 3)]
    assert sorted(n["job_id"] for n in notices) == sorted(str(j) for j in made)
    for job_id, task in made.items():
        job = await jobs.get_job(pool, job_id, tenant.workspace_id)
        assert job is not None and job.state is JobState.RUNNING and job.version == 2
        said = [e.message for e in await jobs.list_job_events(pool, job_id, after=0, limit=10)]
        assert said == [f"Task {task.kind.value} leased by agent:{runtime} (attempt 1 of 3)"]
        (notice,) = [n for n in notices if n["job_id"] == str(job_id)]
        assert notice["state"] == "running" and notice["version"] == 2


async def test_plain_completions_in_one_batch_run_as_one_statement(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, tenant, runtime = await _service(pool)
    for _ in range(3):
        await make_task(pool, tenant)
    held = await service.lease_many(runtime, 0, 3)
    merged: list[int] = []
    statement = service.completer._complete_merged

    async def counted(db: Executor, asked: list[Completion]) -> list[Any]:
        merged.append(len(asked))
        return await statement(db, asked)

    monkeypatch.setattr(service.completer, "_complete_merged", counted)
    async with _listening(pool) as (conn, heard):
        async with batch_of(service.group, 3) as taken:
            answers = await asyncio.gather(
                *(
                    service.complete(
                        runtime, t.id, t.lease_token or uuid.uuid4(), TestResult(True, t.id.hex)
                    )
                    for t in held
                )
            )
        notices = [json.loads(n) for n in await _heard_all(conn, heard, 3)]
    assert taken == [3] and answers == [None] * 3
    assert merged == [3], "one merged statement for the three"
    assert {n["state"] for n in notices} == {"succeeded"}
    for task in held:
        job = await jobs.get_job(pool, task.job_id, tenant.workspace_id)
        assert job is not None and job.state is JobState.SUCCEEDED and job.version == 3
        assert job.result == {"kind": "test", "ok": True, "message": task.id.hex}, "its own result"
        said = [e.message for e in await jobs.list_job_events(pool, task.job_id, after=0, limit=10)]
        assert said[-1] == f"Task test succeeded on agent:{runtime}"


async def test_a_merged_batch_refuses_a_wrong_token_alone_and_accepts_a_repeat_once(
    pool: asyncpg.Pool,
) -> None:
    service, tenant, runtime = await _service(pool)
    for _ in range(2):
        await make_task(pool, tenant)
    first, second = await service.lease_many(runtime, 0, 2)
    assert first.lease_token is not None and second.lease_token is not None
    result = TestResult(True, "")
    async with batch_of(service.group, 4) as taken:
        answers = await asyncio.gather(
            service.complete(runtime, first.id, uuid.uuid4(), result),  # not its lease
            service.complete(runtime, first.id, first.lease_token, result),
            service.complete(runtime, second.id, second.lease_token, result),
            service.complete(runtime, second.id, second.lease_token, result),  # a repeat
            return_exceptions=True,
        )
    assert taken == [4]
    assert isinstance(answers[0], LeaseLost), answers[0]
    assert list(answers[1:]) == [None, None, None]
    for task in (first, second):
        assert await _state(pool, task) is TaskState.SUCCEEDED
        said = [e.message for e in await jobs.list_job_events(pool, task.job_id, after=0, limit=10)]
        assert sum("succeeded" in m for m in said) == 1, said


async def test_a_merged_batch_leaves_a_wrong_tokens_task_leased_when_its_lease_is_absent(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The statement's own token condition refuses a completion: no
    completion with the right token sits beside it to complete the task anyway."""
    service, tenant, runtime = await _service(pool)
    for _ in range(2):
        await make_task(pool, tenant)
    stale, other = await service.lease_many(runtime, 0, 2)
    assert other.lease_token is not None
    merged: list[int] = []
    statement = service.completer._complete_merged

    async def counted(db: Executor, asked: list[Completion]) -> list[Any]:
        merged.append(len(asked))
        return await statement(db, asked)

    monkeypatch.setattr(service.completer, "_complete_merged", counted)
    result = TestResult(True, "")
    async with batch_of(service.group, 2) as taken:
        answers = await asyncio.gather(
            service.complete(runtime, stale.id, uuid.uuid4(), result),  # not its lease
            service.complete(runtime, other.id, other.lease_token, result),
            return_exceptions=True,
        )
    assert taken == [2] and merged == [2], "both went through the merged statement"
    assert isinstance(answers[0], LeaseLost), answers[0]
    assert answers[1] is None
    assert await _state(pool, stale) is TaskState.LEASED
    job = await jobs.get_job(pool, stale.job_id, tenant.workspace_id)
    assert job is not None and job.state is JobState.RUNNING
    assert await _state(pool, other) is TaskState.SUCCEEDED


async def test_a_failing_merged_statement_lets_every_part_run_alone(pool: asyncpg.Pool) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)

    async def no_lease(db: Executor, runtime: str, count: int) -> list[Any]:
        return []

    async def broken(db: Executor, asked: list[str]) -> list[str | None]:
        await jobs.insert_job_event(db, job.id, "merged", now=None)
        await jobs.insert_job_event(db, uuid.uuid4(), "nowhere", now=None)  # refused
        return [None for _ in asked]

    group: GroupCommit[Any] = GroupCommit(pool, no_lease)

    def alone(message: str) -> Callable[[Executor], Awaitable[str]]:
        async def part(db: Executor) -> str:
            await jobs.insert_job_event(db, job.id, message, now=None)
            return message

        return part

    async with batch_of(group, 2) as taken:
        answers = await asyncio.gather(
            *(group.run(alone(m), merge=Merge(broken, m)) for m in ("one", "two"))
        )
    assert taken == [2]
    assert answers == [("one", []), ("two", [])]
    said = [e.message for e in await jobs.list_job_events(pool, job.id, after=0, limit=10)]
    assert said == ["one", "two"], "the merged statement rolled back; each part ran alone"


async def test_a_completion_stuck_on_a_row_lock_is_retried_alone_and_stalls_no_one(
    pool: asyncpg.Pool,
) -> None:
    service, tenant, runtime = await _service(pool)
    for _ in range(2):
        await make_task(pool, tenant)
    stuck, free = await service.lease_many(runtime, 0, 2)
    assert stuck.lease_token is not None and free.lease_token is not None
    service.group.lock_timeout = 0.05
    holder = await pool.acquire()
    locked = holder.transaction()
    await locked.start()
    await holder.execute("SELECT 1 FROM task WHERE id = $1 FOR UPDATE", stuck.id)
    try:
        async with batch_of(service.group, 2) as taken:
            waiting = asyncio.create_task(
                service.complete(runtime, stuck.id, stuck.lease_token, TestResult(True, ""))
            )
            # A deadline, not a timing: without the batch's lock timeout this
            # completion would wait for the lock held below until released.
            async with asyncio.timeout(30):
                assert (
                    await service.complete(runtime, free.id, free.lease_token, TestResult(True, ""))
                    is None
                )
        assert taken == [2]
        assert await _state(pool, free) is TaskState.SUCCEEDED
        assert not waiting.done(), "retried alone: it waits for its lock, in its own transaction"
    finally:
        await locked.rollback()
        await pool.release(holder)
    assert await waiting is None, "the retry succeeded once the lock went"
    assert await _state(pool, stuck) is TaskState.SUCCEEDED
