"""The saved cursor of each incremental stream of a pipeline
(docs/pipelines.md, "Incremental streams")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from setu_engine.values.window import CursorMark
from setu_server.store.db import Executor, translate_errors
from setu_server.store.queries import QUERIES


@dataclass(frozen=True)
class StreamState:
    stream: str
    cursor: CursorMark
    rows: int
    last_job_id: UUID | None
    updated_at: datetime


async def stream_cursors(db: Executor, pipeline_id: UUID) -> dict[str, str]:
    """Stream → saved cursor value, for a run's extract."""
    with translate_errors():
        records = await db.fetch(QUERIES.stream_cursors, pipeline_id)
    return {r["stream"]: r["cursor_value"] for r in records}


async def pipeline_state(db: Executor, pipeline_id: UUID, workspace_id: UUID) -> list[StreamState]:
    with translate_errors():
        records = await db.fetch(QUERIES.pipeline_state, pipeline_id, workspace_id)
    return [
        StreamState(
            stream=r["stream"],
            cursor=CursorMark(r["cursor_column"], r["cursor_type"], r["cursor_value"]),
            rows=int(r["rows"]),
            last_job_id=r["last_job_id"],
            updated_at=r["updated_at"],
        )
        for r in records
    ]


async def advance(
    db: Executor,
    job_id: UUID,
    stream: str,
    cursor: CursorMark,
    rows: int,
    now: datetime | None,
) -> None:
    """Call in the transaction that records the stream's load as committed."""
    with translate_errors():
        await db.execute(
            QUERIES.advance_stream_state,
            job_id,
            stream,
            cursor.column,
            cursor.type,
            cursor.value,
            rows,
            now,
        )


async def reset(
    db: Executor, pipeline_id: UUID, workspace_id: UUID, stream: str | None
) -> list[str]:
    with translate_errors():
        records = await db.fetch(QUERIES.reset_stream_state, pipeline_id, workspace_id, stream)
    return sorted(r["stream"] for r in records)
