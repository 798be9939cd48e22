"""Tasks: what runtimes lease, heartbeat and report. Every state change of a
task is one statement in store/queries/tasks.sql."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

import asyncpg

from setu_client.errors import LeaseLost, NotFound
from setu_server.models import Job, Task, TaskKind, TaskState
from setu_server.store.db import Executor, translate_errors
from setu_server.store.jobs import job_of
from setu_server.store.queries import QUERIES


def task_of(r: asyncpg.Record) -> Task:
    return Task(
        id=r["id"],
        job_id=r["job_id"],
        workspace_id=r["workspace_id"],
        kind=TaskKind(r["kind"]),
        state=TaskState(r["state"]),
        runtime=r["runtime"],
        attempt=r["attempt"],
        max_attempts=r["max_attempts"],
        run_after=r["run_after"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        lease_token=r["lease_token"],
        lease_expires_at=r["lease_expires_at"],
        payload=r["payload"],
        progress=r["progress"],
        result=r["result"],
        error_message=r["error_message"],
        finished_at=r["finished_at"],
        agent_id=r["agent_id"],
        free_retries=r["free_retries"],
    )


async def insert_task(
    db: Executor,
    *,
    id: UUID,
    job_id: UUID,
    workspace_id: UUID,
    kind: TaskKind,
    agent_id: UUID | None,
    max_attempts: int,
    payload: dict[str, Any],
    now: datetime | None,
) -> Task:
    """A pending task for the cloud (agent_id None) or one agent; notifies its runtime."""
    runtime = str(agent_id) if agent_id else "cloud"
    with translate_errors():
        row = await db.fetchrow(
            QUERIES.insert_task,
            id,
            job_id,
            workspace_id,
            kind.value,
            runtime,
            agent_id,
            max_attempts,
            payload,
            now,
        )
    return task_of(row)


def _moved_job(row: asyncpg.Record) -> Job | None:
    moved = row["moved_job"]
    return job_of(moved) if moved is not None else None


async def lease_task(
    db: Executor, runtime: str, token: UUID, seconds: float, now: datetime | None
) -> tuple[Task, Job | None] | None:
    """The leased task and, when it moved to running, its job."""
    leased = await lease_tasks(db, runtime, [token], seconds, now)
    return leased[0] if leased else None


async def lease_tasks(
    db: Executor, runtime: str, tokens: list[UUID], seconds: float, now: datetime | None
) -> list[tuple[Task, Job | None]]:
    """Up to len(tokens) tasks, oldest first, each with its job when this
    lease moved it to running (once per job)."""
    with translate_errors():
        rows = await db.fetch(QUERIES.lease_tasks, runtime, tokens, seconds, now)
    return [(task_of(row), _moved_job(row)) for row in rows]


async def seconds_to_next_eligible(
    db: Executor, runtime: str, now: datetime | None
) -> float | None:
    with translate_errors():
        value: float | None = await db.fetchval(QUERIES.seconds_to_next_eligible, runtime, now)
    return value


async def heartbeat_task(
    db: Executor,
    id: UUID,
    runtime: str,
    token: UUID,
    seconds: float,
    progress: dict[str, Any] | None,
    now: datetime | None,
) -> tuple[datetime, bool] | None:
    """(new expiry, cancel requested), or None when the lease is not live."""
    with translate_errors():
        row = await db.fetchrow(QUERIES.heartbeat_task, id, token, seconds, progress, now, runtime)
    return (row["lease_expires_at"], row["cancel_requested"]) if row else None


async def complete_task(
    db: Executor,
    id: UUID,
    runtime: str,
    token: UUID,
    result: dict[str, Any],
    now: datetime | None,
) -> Task | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.complete_task, id, token, result, now, runtime)
    return task_of(row) if row else None


async def complete_task_and_job(
    db: Executor,
    id: UUID,
    runtime: str,
    token: UUID,
    result: dict[str, Any],
    now: datetime | None,
    kind: str | None = None,
) -> tuple[Task, Job | None] | None:
    """Complete a task whose success ends its job SUCCEEDED, in one statement
    (only a task of `kind`, when given)."""
    with translate_errors():
        row = await db.fetchrow(
            QUERIES.complete_task_and_job, id, token, result, now, kind, runtime
        )
    return (task_of(row), _moved_job(row)) if row else None


async def complete_tasks_and_jobs(
    db: Executor,
    ids: list[UUID],
    tokens: list[UUID],
    results: list[dict[str, Any]],
    kinds: list[str],
    runtimes: list[str],
    now: datetime | None,
) -> list[tuple[Task, Job | None]]:
    """complete_task_and_job for several tasks in one statement (the n-th
    task with the n-th token, result, kind and runtime): the tasks completed
    (each with its job), in no particular order; a completion whose
    conditions fail is left out."""
    with translate_errors():
        rows = await db.fetch(
            QUERIES.complete_tasks_and_jobs, ids, tokens, results, kinds, runtimes, now
        )
    return [(task_of(row), _moved_job(row)) for row in rows]


async def fail_task(
    db: Executor,
    id: UUID,
    runtime: str,
    token: UUID,
    error: str,
    *,
    backoff_seconds: float,
    max_backoff: float,
    retryable: bool,
    now: datetime | None,
) -> Task | None:
    with translate_errors():
        row = await db.fetchrow(
            QUERIES.fail_task,
            id,
            token,
            error,
            backoff_seconds,
            retryable,
            now,
            max_backoff,
            runtime,
        )
    return task_of(row) if row else None


async def release_task(
    db: Executor,
    id: UUID,
    runtime: str,
    token: UUID,
    message: str,
    *,
    outage: bool,
    backoff_seconds: float,
    max_backoff: float,
    free_retries: int,
    now: datetime | None,
) -> Task | None:
    """The task pending again without spending an attempt, or None when the
    lease is not live, the job asked to stop or ended, or (an outage) the
    free retries are spent."""
    with translate_errors():
        row = await db.fetchrow(
            QUERIES.release_task,
            id,
            token,
            runtime,
            now,
            backoff_seconds,
            outage,
            max_backoff,
            free_retries,
            message,
        )
    return task_of(row) if row else None


async def get_task(db: Executor, id: UUID) -> Task | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.get_task, id)
    return task_of(row) if row else None


async def get_agent_task(db: Executor, id: UUID, runtime: str) -> Task | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.get_agent_task, id, runtime)
    return task_of(row) if row else None


async def own_task(db: Executor, id: UUID, runtime: str) -> Task:
    """The task of `runtime` a report names; NotFound when it has none such."""
    task = await get_agent_task(db, id, runtime)
    if task is None:
        raise NotFound(f"task {id} not found")
    return task


def lease_live(task: Task, token: UUID, now: datetime) -> bool:
    """`token` names the task's current lease, and it has not expired."""
    return (
        task.state is TaskState.LEASED
        and task.lease_token == token
        and task.lease_expires_at is not None
        and task.lease_expires_at > now
    )


def lease_lost(task: Task) -> LeaseLost:
    """The answer to a report whose lease is no longer live: stop the task."""
    if task.state is TaskState.LEASED:
        why = "the lease token is not the current one, or the lease expired"
    elif task.state is TaskState.PENDING:
        why = "the lease expired and the task was requeued"
    else:
        why = f"the task is already {task.state.value}"
    return LeaseLost(f"lease lost on task {task.id}: {why}; stop working on it")


async def reap_expired_leases(
    db: Executor, *, batch: int, backoff_seconds: float, max_backoff: float, now: datetime | None
) -> list[Task]:
    with translate_errors():
        rows = await db.fetch(QUERIES.reap_expired_leases, batch, backoff_seconds, max_backoff, now)
    return [task_of(r) for r in rows]


class EndedTask(NamedTuple):
    """What a job's outcome reads of a task that ended (a Task has it too)."""

    id: UUID
    job_id: UUID
    kind: TaskKind
    runtime: str
    error_message: str


async def fail_agent_tasks(
    db: Executor, runtime: str, error: str, now: datetime | None
) -> list[EndedTask]:
    with translate_errors():
        rows = await db.fetch(QUERIES.fail_agent_tasks, runtime, error, now)
    return [EndedTask(r[0], r[1], TaskKind(r[2]), r[3], r[4]) for r in rows]


async def count_leased_tasks(db: Executor, job_id: UUID) -> int:
    with translate_errors():
        count: int = await db.fetchval(QUERIES.count_leased_tasks, job_id)
    return count


async def count_unfinished_tasks(db: Executor, job_id: UUID) -> int:
    with translate_errors():
        count: int = await db.fetchval(QUERIES.count_unfinished_tasks, job_id)
    return count


async def mark_task_cancelled(db: Executor, task_id: UUID) -> None:
    with translate_errors():
        await db.execute(QUERIES.mark_task_cancelled, task_id)


async def cancel_pending_tasks(db: Executor, job_id: UUID, now: datetime | None) -> None:
    with translate_errors():
        await db.execute(QUERIES.cancel_pending_tasks, job_id, now)


async def mark_tasks_cancelled(db: Executor, task_ids: list[UUID]) -> None:
    with translate_errors():
        await db.execute(QUERIES.mark_tasks_cancelled, task_ids)


async def cancel_pending_tasks_of_jobs(
    db: Executor, job_ids: list[UUID], now: datetime | None
) -> None:
    """cancel_pending_tasks for every job of `job_ids`, in one statement."""
    with translate_errors():
        await db.execute(QUERIES.cancel_pending_tasks_of_jobs, job_ids, now)
