"""Factories: each test makes the objects it needs, through the real services."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from setu_client.clock import SystemClock
from setu_server.models import (
    Connection,
    Job,
    JobKind,
    JobState,
    Pipeline,
    Placement,
    Task,
    TaskKind,
    WriteMode,
)
from setu_server.server import Running
from setu_server.service.admin import AdminService
from setu_server.store import connections, jobs, pipelines, tasks


@dataclass(frozen=True)
class Tenant:
    workspace_id: uuid.UUID
    api_key: str
    agent_id: uuid.UUID
    agent_token: str


async def make_tenant(pool: asyncpg.Pool, name: str | None = None) -> Tenant:
    """A workspace with one API key and one agent."""
    admin = AdminService(pool, SystemClock())
    workspace = await admin.create_workspace(name or f"ws-{uuid.uuid4().hex[:8]}")
    key = await admin.create_api_key(workspace.id, "test key")
    agent = await admin.create_agent(workspace.id, "test agent")
    return Tenant(workspace.id, key.secret, agent.value.id, agent.secret)


async def make_job(
    pool: asyncpg.Pool,
    workspace_id: uuid.UUID,
    *,
    kind: JobKind = JobKind.TEST,
    state: JobState = JobState.PENDING,
) -> Job:
    return await jobs.insert_job(
        pool, id=uuid.uuid4(), workspace_id=workspace_id, kind=kind, state=state, now=None
    )


async def make_task(
    pool: asyncpg.Pool,
    tenant: Tenant,
    *,
    job: Job | None = None,
    payload: dict[str, object] | None = None,
    max_attempts: int = 3,
    cloud: bool = False,
    now: datetime | None = None,
    kind: TaskKind = TaskKind.TEST,
) -> Task:
    """A pending task (`test` unless told) on the tenant's agent (or the
    cloud), for a new pending job unless one is given."""
    job = job or await make_job(pool, tenant.workspace_id)
    return await tasks.insert_task(
        pool,
        id=uuid.uuid4(),
        job_id=job.id,
        workspace_id=tenant.workspace_id,
        kind=kind,
        agent_id=None if cloud else tenant.agent_id,
        max_attempts=max_attempts,
        payload=payload or {},
        now=now,
    )


async def make_connection(
    pool: asyncpg.Pool,
    workspace_id: uuid.UUID,
    *,
    name: str | None = None,
    provider: str = "sqlite",
    config: dict[str, Any] | None = None,
    agent_id: uuid.UUID | None = None,
) -> Connection:
    """A connection row, unvalidated; placed on `agent_id` when given, else cloud."""
    return await connections.insert_connection(
        pool,
        id=uuid.uuid4(),
        workspace_id=workspace_id,
        name=name or f"conn-{uuid.uuid4().hex[:8]}",
        provider=provider,
        config=config if config is not None else {"path": "/tmp/setu-test.db"},
        placement=Placement.AGENT if agent_id else Placement.CLOUD,
        agent_id=agent_id,
        now=None,
    )


async def make_pipeline(
    pool: asyncpg.Pool,
    workspace_id: uuid.UUID,
    *,
    source: Connection | None = None,
    destination: Connection | None = None,
    name: str | None = None,
    streams: list[str] | None = None,
    spec: dict[str, Any] | None = None,
    write_mode: WriteMode = WriteMode.APPEND,
    schedule: str = "",
    paused: bool = False,
    next_run_at: datetime | None = None,
) -> Pipeline:
    """A pipeline row, unvalidated; new cloud connections when none are given."""
    source = source or await make_connection(pool, workspace_id)
    destination = destination or await make_connection(pool, workspace_id)
    return await pipelines.insert_pipeline(
        pool,
        id=uuid.uuid4(),
        workspace_id=workspace_id,
        name=name or f"pipe-{uuid.uuid4().hex[:8]}",
        source_connection_id=source.id,
        destination_connection_id=destination.id,
        streams=streams or [],
        spec=spec or {},
        write_mode=write_mode,
        schedule=schedule,
        paused=paused,
        next_run_at=next_run_at,
        now=None,
    )


def detached_job(now: datetime = datetime(2026, 1, 1, tzinfo=UTC)) -> Job:
    """A running job that exists only in memory (for the watch hub's own tests)."""
    return Job(
        id=uuid.uuid4(),
        workspace_id=uuid.uuid4(),
        kind=JobKind.TEST,
        state=JobState.RUNNING,
        version=1,
        created_at=now,
        updated_at=now,
    )


async def no_jobs(ids: list[uuid.UUID]) -> list[Job]:
    """A watch hub's reader that finds nothing."""
    return []


async def parked_wait(server: Running, tenant: Tenant, job: Job) -> asyncio.Task[Job]:
    """A WaitJob parked on `job`, its first read done."""
    read = asyncio.Event()

    async def mark(job_id: uuid.UUID) -> None:
        read.set()

    server.jobs.hooks.after_read = mark
    wait = asyncio.create_task(server.jobs.wait(tenant.workspace_id, job.id, 60.0))
    await read.wait()
    return wait
