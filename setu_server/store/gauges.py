"""What the metrics read from the database: the task queue's census."""

from __future__ import annotations

from setu_server.metrics import TaskCount
from setu_server.store.db import Executor, translate_errors
from setu_server.store.queries import QUERIES


async def count_open_tasks(db: Executor) -> list[TaskCount]:
    with translate_errors():
        rows = await db.fetch(QUERIES.count_open_tasks)
    return [TaskCount(r["runtime"], r["kind"], r["state"], r["tasks"]) for r in rows]
