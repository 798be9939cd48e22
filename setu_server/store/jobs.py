"""Jobs: rows, reads, and the one path that changes a job's state."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from setu_client.errors import IllegalTransition, JobNotFound
from setu_server.models import (
    EventLevel,
    Job,
    JobEvent,
    JobFilter,
    JobKind,
    JobOutput,
    JobState,
    Phase,
    RowChanges,
    RunSnapshot,
    job_states_into,
)
from setu_server.store.db import Executor, translate_errors
from setu_server.store.queries import QUERIES

# Rows made Jobs per turn of the event loop by `changed_jobs`: 200 took
# 2.3 ms on a quiet 2-core machine (1,000 took 60-110 ms on a loaded one).
CONVERT_PER_TURN = 200


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
        # Only a run keeps a snapshot; a bare run row (tests) has none.
        params=RunSnapshot.from_json(r["params"]) if r["kind"] == "run" and r["params"] else None,
        phase=Phase(r["phase"]) if r["phase"] else None,
        dry_run=r["dry_run"],
        cancel_requested=r["cancel_requested"],
        error_message=r["error_message"],
        rows_extracted=r["rows_extracted"],
        rows_loaded=r["rows_loaded"],
        rows_total=r["rows_total"],
        rows_filtered=r["rows_filtered"],
        rows_inserted=r["rows_inserted"],
        rows_updated=r["rows_updated"],
        rows_unchanged=r["rows_unchanged"],
        rows_deleted=r["rows_deleted"],
        stream_progress=_stream_progress(r["stream_progress"]),
        extract_runtime=r["extract_runtime"],
        load_runtime=r["load_runtime"],
        result=r["result"],
        idempotency_key=r["idempotency_key"],
        scheduled_for=r["scheduled_for"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
    )


def _stream_progress(value: Any) -> dict[str, tuple[int, int]]:
    """job.stream_progress ({stream: {"extracted": n, "loaded": n}}) as pairs."""
    if not isinstance(value, dict):
        return {}
    return {
        str(stream): (int(counts.get("extracted", 0)), int(counts.get("loaded", 0)))
        for stream, counts in value.items()
        if isinstance(counts, dict)
    }


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


async def get_jobs(db: Executor, ids: list[UUID]) -> list[Job]:
    """Jobs by id across workspaces: for the watch hub, never for callers."""
    with translate_errors():
        return [job_of(r) for r in await db.fetch(QUERIES.get_jobs, ids)]


async def changed_jobs(db: Executor, ids: list[UUID], versions: list[int]) -> list[Job]:
    """Of the jobs `ids`, those whose version is newer than `versions` (the
    ones the watch hub holds, in the same order; 0 for none): the hub's
    re-check, which converts only what changed. Never for callers.

    When many changed (a re-check after a reconnect that missed a storm), the
    rows become Jobs `CONVERT_PER_TURN` at a time, the event loop free
    between slices: every call on the server waits for a turn to end."""
    with translate_errors():
        rows = await db.fetch(QUERIES.changed_jobs, ids, versions)
    found = [job_of(r) for r in rows[:CONVERT_PER_TURN]]
    for start in range(CONVERT_PER_TURN, len(rows), CONVERT_PER_TURN):
        await asyncio.sleep(0)
        found += [job_of(r) for r in rows[start : start + CONVERT_PER_TURN]]
    return found


async def transition_jobs(
    db: Executor,
    ids: list[UUID],
    to: JobState,
    *,
    now: datetime | None,
    message: str,
    level: EventLevel = EventLevel.INFO,
    error_message: str | None = None,
    phase: Phase | None = None,
    only_from: frozenset[JobState] | None = None,
    result: dict[str, Any] | None = None,
) -> list[Job]:
    """Move every listed job that may legally go to `to`; the others stay as
    they are. One statement: state, version, event and notification commit
    together. Returns the jobs that moved."""
    allowed = job_states_into(to) if only_from is None else job_states_into(to) & only_from
    with translate_errors():
        rows = await db.fetch(
            QUERIES.transition_jobs,
            ids,
            to.value,
            sorted(s.value for s in allowed),
            error_message,
            phase.value if phase else None,
            level.value,
            message,
            now,
            result,
        )
    return [job_of(r) for r in rows]


async def transition_job(
    db: Executor,
    id: UUID,
    to: JobState,
    *,
    now: datetime | None,
    message: str,
    level: EventLevel = EventLevel.INFO,
    error_message: str | None = None,
    phase: Phase | None = None,
    only_from: frozenset[JobState] | None = None,
    result: dict[str, Any] | None = None,
) -> Job:
    """Move one job, or say why it cannot move."""
    moved = await transition_jobs(
        db,
        [id],
        to,
        now=now,
        message=message,
        level=level,
        error_message=error_message,
        phase=phase,
        only_from=only_from,
        result=result,
    )
    if moved:
        return moved[0]
    with translate_errors():
        state = await db.fetchval(QUERIES.job_state, id)
    if state is None:
        raise JobNotFound(f"job {id} not found")
    raise IllegalTransition(f"job {id} is {state}: it cannot become {to.value}")


async def jobs_asked_to_cancel(db: Executor, ids: list[UUID]) -> dict[UUID, str | None]:
    """Of the live jobs `ids`, those that asked to stop: id -> the reason
    waiting in error_message. Never for callers (any workspace)."""
    with translate_errors():
        rows = await db.fetch(QUERIES.jobs_asked_to_cancel, ids)
    return {r["id"]: r["error_message"] for r in rows}


async def request_job_cancel(
    db: Executor, id: UUID, reason: str, now: datetime | None
) -> Job | None:
    """Set cancel_requested on a live job; None when already set or ended."""
    with translate_errors():
        row = await db.fetchrow(QUERIES.request_job_cancel, id, now, reason)
    return job_of(row) if row else None


async def lock_job(db: Executor, id: UUID, workspace_id: UUID) -> Job | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.lock_job, id, workspace_id)
    return job_of(row) if row else None


def _event(r: asyncpg.Record) -> JobEvent:
    return JobEvent(
        sequence=r["sequence"],
        job_id=r["job_id"],
        level=EventLevel(r["level"]),
        stream=r["stream"],
        message=r["message"],
        created_at=r["created_at"],
    )


async def insert_job_event(
    db: Executor,
    job_id: UUID,
    message: str,
    *,
    now: datetime | None,
    level: EventLevel = EventLevel.INFO,
    stream: str = "",
) -> JobEvent:
    with translate_errors():
        row = await db.fetchrow(QUERIES.insert_job_event, job_id, level.value, stream, message, now)
    return _event(row)


async def list_jobs(
    db: Executor,
    workspace_id: UUID,
    where: JobFilter,
    *,
    after: tuple[datetime, UUID] | None,
    limit: int,
) -> list[Job]:
    with translate_errors():
        rows = await db.fetch(
            QUERIES.list_jobs,
            workspace_id,
            sorted(s.value for s in where.states),
            sorted(k.value for k in where.kinds),
            where.pipeline_id,
            where.connection_id,
            where.created_after,
            where.created_before,
            after[0] if after else None,
            after[1] if after else None,
            limit,
        )
    return [job_of(r) for r in rows]


async def list_job_events(db: Executor, job_id: UUID, *, after: int, limit: int) -> list[JobEvent]:
    with translate_errors():
        return [_event(r) for r in await db.fetch(QUERIES.list_job_events, job_id, after, limit)]


async def job_outputs(db: Executor, job_id: UUID) -> list[JobOutput]:
    with translate_errors():
        rows = await db.fetch(QUERIES.job_outputs, job_id)
    return [
        JobOutput(
            r["stream"],
            r["rows_extracted"],
            r["rows_loaded"],
            r["checksum"],
            r["loaded"],
            _changes(r),
        )
        for r in rows
    ]


def _changes(r: Any) -> RowChanges | None:
    if r["rows_inserted"] is None:
        return None
    return RowChanges(
        r["rows_inserted"],
        r["rows_updated"] or 0,
        r["rows_unchanged"] or 0,
        r["rows_deleted"] or 0,
    )


async def get_job_any(db: Executor, id: UUID) -> Job | None:
    """A job whatever its workspace: for the server's own decisions, never for callers."""
    with translate_errors():
        row = await db.fetchrow(QUERIES.get_job_any, id)
    return job_of(row) if row else None
