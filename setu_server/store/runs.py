"""Runs: the pipeline a run moves, its progress and its staged artifacts."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from setu_engine.staged.staging import Part, StoredPart
from setu_server.models import (
    Endpoint,
    Job,
    Phase,
    PipelineForRun,
    Placement,
    RowChanges,
    StagedRun,
    WriteMode,
)
from setu_server.store.db import Executor, translate_errors
from setu_server.store.jobs import job_of
from setu_server.store.queries import QUERIES


def _endpoint(r: asyncpg.Record, side: str) -> Endpoint:
    return Endpoint(
        id=r[f"{side}_id"],
        name=r[f"{side}_name"],
        provider=r[f"{side}_provider"],
        placement=Placement(r[f"{side}_placement"]),
        agent_id=r[f"{side}_agent_id"],
    )


async def pipeline_for_run(
    db: Executor, pipeline_id: UUID, workspace_id: UUID
) -> PipelineForRun | None:
    with translate_errors():
        r = await db.fetchrow(QUERIES.pipeline_for_run, pipeline_id, workspace_id)
    if r is None:
        return None
    return PipelineForRun(
        id=r["id"],
        workspace_id=r["workspace_id"],
        name=r["name"],
        streams=list(r["streams"]),
        spec=r["spec"],
        write_mode=WriteMode(r["write_mode"]),
        source=_endpoint(r, "source"),
        destination=_endpoint(r, "destination"),
    )


async def due_pipelines(
    db: Executor, now: datetime | None, limit: int
) -> list[tuple[UUID, UUID, str, datetime]]:
    """(pipeline, workspace, schedule, tick) of every pipeline whose tick has
    come, locked until the caller's transaction ends."""
    with translate_errors():
        rows = await db.fetch(QUERIES.due_pipelines, now, limit)
    return [(r["id"], r["workspace_id"], r["schedule"], r["next_run_at"]) for r in rows]


async def set_next_run(db: Executor, pipeline_id: UUID, next_run_at: datetime) -> None:
    with translate_errors():
        await db.execute(QUERIES.set_next_run, pipeline_id, next_run_at)


async def job_by_idempotency_key(db: Executor, workspace_id: UUID, key: str) -> Job | None:
    with translate_errors():
        r = await db.fetchrow(QUERIES.job_by_idempotency_key, workspace_id, key)
    return job_of(r) if r else None


async def connection_for_runtime(
    db: Executor, connection_id: UUID
) -> tuple[str, dict[str, Any], UUID] | None:
    """(provider, config with secret references, workspace) of a connection."""
    with translate_errors():
        r = await db.fetchrow(QUERIES.connection_for_runtime, connection_id)
    return (r["provider"], r["config"], r["workspace_id"]) if r else None


async def set_run_progress(
    db: Executor,
    job_id: UUID,
    extracted: int,
    loaded: int,
    now: datetime | None,
    streams: Mapping[str, tuple[int, int]] | None = None,
) -> bool:
    """Writes the counts (and each moving stream's (extracted, loaded), when
    given); True when the run was asked to cancel."""
    moving = None
    if streams is not None:
        moving = {s: {"extracted": e, "loaded": w} for s, (e, w) in streams.items()}
    with translate_errors():
        cancel: bool | None = await db.fetchval(
            QUERIES.set_run_progress, job_id, extracted, loaded, now, moving
        )
    return bool(cancel)


async def set_run_plan(
    db: Executor,
    job_id: UUID,
    *,
    now: datetime | None,
    rows_total: int | None = None,
    extract_runtime: str | None = None,
    load_runtime: str | None = None,
) -> None:
    with translate_errors():
        await db.execute(
            QUERIES.set_run_plan, job_id, rows_total, extract_runtime, load_runtime, now
        )


async def save_artifact(
    db: Executor,
    *,
    job_id: UUID,
    task_id: UUID | None,
    stream: str,
    blob_prefix: str,
    parts: list[str],
    rows: int,
    checksum: str,
    now: datetime | None,
) -> None:
    with translate_errors():
        await db.execute(
            QUERIES.save_artifact,
            uuid.uuid4(),
            job_id,
            task_id,
            stream,
            blob_prefix,
            parts,
            rows,
            checksum,
            now,
        )


async def save_output(
    db: Executor,
    job_id: UUID,
    stream: str,
    *,
    now: datetime | None,
    rows_extracted: int | None = None,
    rows_loaded: int | None = None,
    checksum: str | None = None,
    loaded: bool = False,
    changes: RowChanges | None = None,
) -> None:
    counts: tuple[int | None, ...] = (None, None, None, None)
    if changes is not None:
        counts = (changes.inserted, changes.updated, changes.unchanged, changes.deleted)
    with translate_errors():
        await db.execute(
            QUERIES.save_output,
            job_id,
            stream,
            rows_extracted,
            rows_loaded,
            checksum,
            loaded,
            now,
            *counts,
        )


async def set_run_phase(
    db: Executor, job_id: UUID, phase: Phase, message: str, now: datetime | None
) -> Job | None:
    """Moves a running run to phase; None when it is not running."""
    with translate_errors():
        r = await db.fetchrow(QUERIES.set_run_phase, job_id, phase.value, message, now)
    return job_of(r) if r else None


async def runs_to_purge(
    db: Executor,
    now: datetime | None,
    retention_seconds: float,
    limit: int,
    skip: list[UUID] | None = None,
) -> list[StagedRun]:
    """Ended runs past the retention, locked until the caller's transaction ends."""
    with translate_errors():
        rows = await db.fetch(QUERIES.runs_to_purge, now, retention_seconds, limit, skip or [])
    return [
        StagedRun(r["id"], r["workspace_id"], r["pipeline_id"], list(r["prefixes"])) for r in rows
    ]


async def mark_staged_purged(db: Executor, ids: list[UUID], now: datetime | None) -> None:
    with translate_errors():
        await db.execute(QUERIES.mark_staged_purged, ids, now)


async def record_run_parts(
    db: Executor, job_id: UUID, parts: Sequence[StoredPart], now: datetime | None
) -> None:
    """Parts an extract stored whole (setu_engine/staged/staging.py), in one statement."""
    if not parts:
        return
    with translate_errors():
        await db.execute(
            QUERIES.record_run_parts,
            job_id,
            [p.stream_index for p in parts],
            [p.number for p in parts],
            [p.stream for p in parts],
            [p.part.path for p in parts],
            [p.part.rows for p in parts],
            [p.part.size for p in parts],
            [p.part.sha256 for p in parts],
            [p.position for p in parts],
            now,
        )


async def run_parts(db: Executor, job_id: UUID) -> list[StoredPart]:
    """The parts the run's extract stored so far, in order."""
    with translate_errors():
        rows = await db.fetch(QUERIES.run_parts, job_id)
    return [
        StoredPart(
            r["stream_index"],
            r["stream"],
            r["number"],
            Part(r["path"], r["rows"], r["bytes"], r["sha256"]),
            r["position"],
        )
        for r in rows
    ]
