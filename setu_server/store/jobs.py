"""Jobs: rows, reads, and (in the WaitJob issue) the one transition path."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from setu_server.models import Job, JobKind, JobState, Phase
from setu_server.store.db import Executor, translate_errors
from setu_server.store.queries import QUERIES


def job_of(r: asyncpg.Record) -> Job:
    return Job(
        id=r["id"],
        workspace_id=r["workspace_id"],
        kind=JobKind(r["kind"]),
        state=JobState(r["state"]),
        version=r["version"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        pipeline_id=r["pipeline_id"],
        connection_id=r["connection_id"],
        params=r["params"],
        phase=Phase(r["phase"]) if r["phase"] else None,
        dry_run=r["dry_run"],
        cancel_requested=r["cancel_requested"],
        error_message=r["error_message"],
        rows_extracted=r["rows_extracted"],
        rows_loaded=r["rows_loaded"],
        rows_total=r["rows_total"],
        extract_runtime=r["extract_runtime"],
        load_runtime=r["load_runtime"],
        result=r["result"],
        idempotency_key=r["idempotency_key"],
        scheduled_for=r["scheduled_for"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
    )


async def insert_job(
    db: Executor,
    *,
    id: UUID,
    workspace_id: UUID,
    kind: JobKind,
    state: JobState,
    now: datetime | None,
    pipeline_id: UUID | None = None,
    connection_id: UUID | None = None,
    params: dict[str, Any] | None = None,
    dry_run: bool = False,
    idempotency_key: str | None = None,
    scheduled_for: datetime | None = None,
) -> Job:
    with translate_errors():
        row = await db.fetchrow(
            QUERIES.insert_job,
            id,
            workspace_id,
            kind.value,
            state.value,
            pipeline_id,
            connection_id,
            params or {},
            dry_run,
            idempotency_key,
            scheduled_for,
            now,
        )
    return job_of(row)


async def get_job(db: Executor, id: UUID, workspace_id: UUID) -> Job | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.get_job, id, workspace_id)
    return job_of(row) if row else None
