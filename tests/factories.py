"""Factories: each test makes the objects it needs, through the real services."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from setu_client.clock import SystemClock
from setu_server.models import Job, JobKind, JobState, Task, TaskKind
from setu_server.service.admin import AdminService
from setu_server.store import jobs, tasks


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
) -> Task:
    """A pending `test` task on the tenant's agent (or the cloud), for a new
    pending job unless one is given."""
    job = job or await make_job(pool, tenant.workspace_id)
    return await tasks.insert_task(
        pool,
        id=uuid.uuid4(),
        job_id=job.id,
        workspace_id=tenant.workspace_id,
        kind=TaskKind.TEST,
        agent_id=None if cloud else tenant.agent_id,
        max_attempts=max_attempts,
        payload=payload or {},
        now=now,
    )
