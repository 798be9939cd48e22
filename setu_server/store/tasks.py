"""Tasks: what runtimes lease and execute."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from setu_server.store.db import Executor, translate_errors
from setu_server.store.queries import QUERIES


async def count_leased_tasks(db: Executor, job_id: UUID) -> int:
    with translate_errors():
        count: int = await db.fetchval(QUERIES.count_leased_tasks, job_id)
    return count


async def cancel_pending_tasks(db: Executor, job_id: UUID, now: datetime | None) -> None:
    with translate_errors():
        await db.execute(QUERIES.cancel_pending_tasks, job_id, now)


async def insert_task(
    db: Executor,
    *,
    id: UUID,
    job_id: UUID,
    workspace_id: UUID,
    kind: str,
    agent_id: UUID | None,
    max_attempts: int,
    payload: dict[str, object],
    now: datetime | None,
) -> UUID:
    """A pending task for the cloud (agent_id None) or one agent."""
    runtime = str(agent_id) if agent_id else "cloud"
    with translate_errors():
        row = await db.fetchrow(
            QUERIES.insert_task,
            id,
            job_id,
            workspace_id,
            kind,
            runtime,
            agent_id,
            max_attempts,
            payload,
            now,
        )
    task_id: UUID = row["id"]
    return task_id
