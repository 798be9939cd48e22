"""Pipelines: rows, reads, and what blocks deleting them or their connections."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from setu_server.models import Pipeline, WriteMode
from setu_server.store.db import Executor, translate_errors
from setu_server.store.queries import QUERIES


def pipeline_of(r: asyncpg.Record) -> Pipeline:
    return Pipeline(
        id=r["id"],
        workspace_id=r["workspace_id"],
        name=r["name"],
        source_connection_id=r["source_connection_id"],
        destination_connection_id=r["destination_connection_id"],
        streams=list(r["streams"]),
        spec=r["spec"],
        write_mode=WriteMode(r["write_mode"]),
        schedule=r["schedule"] or "",
        paused=r["paused"],
        next_run_at=r["next_run_at"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
    )


def _fields(p: Pipeline) -> tuple[object, ...]:
    """The mutable columns in query order; an empty schedule is stored as
    NULL, which is what the scheduler's index selects on."""
    return (
        p.name,
        p.source_connection_id,
        p.destination_connection_id,
        p.streams,
        p.spec,
        p.write_mode.value,
        p.schedule or None,
        p.paused,
        p.next_run_at,
    )


async def insert_pipeline(
    db: Executor,
    *,
    id: UUID,
    workspace_id: UUID,
    name: str,
    source_connection_id: UUID,
    destination_connection_id: UUID,
    streams: list[str],
    spec: dict[str, Any],
    write_mode: WriteMode,
    schedule: str,
    paused: bool,
    next_run_at: datetime | None,
    now: datetime | None,
) -> Pipeline:
    """Raises AlreadyExists when the name is taken in the workspace."""
    with translate_errors():
        row = await db.fetchrow(
            QUERIES.insert_pipeline,
            id,
            workspace_id,
            name,
            source_connection_id,
            destination_connection_id,
            streams,
            spec,
            write_mode.value,
            schedule or None,
            paused,
            next_run_at,
            now,
        )
    return pipeline_of(row)


async def get_pipeline(db: Executor, id: UUID, workspace_id: UUID) -> Pipeline | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.get_pipeline, id, workspace_id)
    return pipeline_of(row) if row else None


async def lock_pipeline(db: asyncpg.Connection, id: UUID, workspace_id: UUID) -> Pipeline | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.lock_pipeline, id, workspace_id)
    return pipeline_of(row) if row else None


async def list_pipelines(
    db: Executor, workspace_id: UUID, *, after: str | None, limit: int
) -> list[Pipeline]:
    with translate_errors():
        rows = await db.fetch(QUERIES.list_pipelines, workspace_id, after, limit)
    return [pipeline_of(r) for r in rows]


async def update_pipeline(db: Executor, p: Pipeline, now: datetime | None) -> Pipeline | None:
    """Writes every mutable field of `p`; raises AlreadyExists for a taken name."""
    with translate_errors():
        row = await db.fetchrow(QUERIES.update_pipeline, p.id, p.workspace_id, *_fields(p), now)
    return pipeline_of(row) if row else None


async def delete_pipeline(db: Executor, id: UUID, workspace_id: UUID) -> bool:
    with translate_errors():
        return await db.fetchval(QUERIES.delete_pipeline, id, workspace_id) is not None


async def pipelines_using_connection(db: Executor, connection_id: UUID) -> list[str]:
    """Names of the pipelines that read from or write to the connection."""
    with translate_errors():
        rows = await db.fetch(QUERIES.pipelines_using_connection, connection_id)
    return [r["name"] for r in rows]


async def active_pipeline_run(db: Executor, pipeline_id: UUID) -> UUID | None:
    """A pending or running run of the pipeline, if there is one."""
    with translate_errors():
        found: UUID | None = await db.fetchval(QUERIES.active_pipeline_run, pipeline_id)
    return found


async def ready_pipeline_runs(db: Executor, pipeline_id: UUID) -> list[UUID]:
    """The pipeline's runs that wait in READY for a StartJob."""
    with translate_errors():
        rows = await db.fetch(QUERIES.ready_pipeline_runs, pipeline_id)
    return [r["id"] for r in rows]
