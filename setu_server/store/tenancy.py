"""Workspaces, API keys and agents."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import asyncpg

from setu_server.models import (
    Agent,
    AgentName,
    AgentWork,
    ApiKey,
    HeldTask,
    TaskKind,
    Workspace,
)
from setu_server.store.db import Executor, translate_errors
from setu_server.store.queries import QUERIES


def _workspace(r: asyncpg.Record) -> Workspace:
    return Workspace(id=r["id"], name=r["name"], created_at=r["created_at"])


def _api_key(r: asyncpg.Record) -> ApiKey:
    return ApiKey(
        id=r["id"],
        workspace_id=r["workspace_id"],
        name=r["name"],
        prefix=r["prefix"],
        created_at=r["created_at"],
        revoked_at=r["revoked_at"],
    )


def _agent(r: asyncpg.Record) -> Agent:
    return Agent(
        id=r["id"],
        workspace_id=r["workspace_id"],
        name=r["name"],
        active=r["active"],
        version=r["version"],
        capabilities=list(r["capabilities"]),
        hostname=r["hostname"],
        last_seen_at=r["last_seen_at"],
        created_at=r["created_at"],
        signed_off_at=r.get("signed_off_at"),
    )


async def insert_workspace(db: Executor, id: UUID, name: str, now: datetime | None) -> Workspace:
    with translate_errors():
        return _workspace(await db.fetchrow(QUERIES.insert_workspace, id, name, now))


async def get_workspace(db: Executor, id: UUID) -> Workspace | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.get_workspace, id)
    return _workspace(row) if row else None


async def get_workspace_by_name(db: Executor, name: str) -> Workspace | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.get_workspace_by_name, name)
    return _workspace(row) if row else None


async def list_workspaces(db: Executor) -> list[Workspace]:
    with translate_errors():
        return [_workspace(r) for r in await db.fetch(QUERIES.list_workspaces)]


async def insert_api_key(
    db: Executor,
    id: UUID,
    workspace_id: UUID,
    name: str,
    prefix: str,
    token_hash: bytes,
    now: datetime | None,
) -> ApiKey:
    with translate_errors():
        row = await db.fetchrow(
            QUERIES.insert_api_key, id, workspace_id, name, prefix, token_hash, now
        )
    return _api_key(row)


async def list_api_keys(db: Executor, workspace_id: UUID) -> list[ApiKey]:
    with translate_errors():
        return [_api_key(r) for r in await db.fetch(QUERIES.list_api_keys, workspace_id)]


async def revoke_api_key(db: Executor, id: UUID, now: datetime | None) -> ApiKey | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.revoke_api_key, id, now)
    return _api_key(row) if row else None


async def authenticate_api_key(
    db: Executor, token_hash: bytes, now: datetime | None
) -> tuple[UUID, UUID] | None:
    """(key id, workspace id) of a live key with this hash."""
    with translate_errors():
        row = await db.fetchrow(QUERIES.authenticate_api_key, token_hash, now)
    return (row["id"], row["workspace_id"]) if row else None


async def insert_agent(
    db: Executor, id: UUID, workspace_id: UUID, name: str, token_hash: bytes, now: datetime | None
) -> Agent:
    with translate_errors():
        return _agent(
            await db.fetchrow(QUERIES.insert_agent, id, workspace_id, name, token_hash, now)
        )


async def get_agent(db: Executor, id: UUID) -> Agent | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.get_agent, id)
    return _agent(row) if row else None


async def list_agents(db: Executor, workspace_id: UUID) -> list[Agent]:
    with translate_errors():
        return [_agent(r) for r in await db.fetch(QUERIES.list_agents, workspace_id)]


async def agent_names(db: Executor, workspace_id: UUID, ids: list[UUID]) -> list[AgentName]:
    """Those of `ids` that are agents of the workspace, as people read them."""
    with translate_errors():
        rows = await db.fetch(QUERIES.agent_names, workspace_id, ids)
    return [AgentName(r["id"], r["name"], r["shared"]) for r in rows]


async def deactivate_agent(db: Executor, id: UUID) -> Agent | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.deactivate_agent, id)
    return _agent(row) if row else None


async def authenticate_agent(
    db: Executor, token_hash: bytes, now: datetime | None
) -> tuple[UUID, UUID] | None:
    """(agent id, workspace id) of an active agent with this token hash."""
    with translate_errors():
        row = await db.fetchrow(QUERIES.authenticate_agent, token_hash, now)
    return (row["id"], row["workspace_id"]) if row else None


async def check_in_agent(
    db: Executor,
    id: UUID,
    version: str,
    capabilities: list[str],
    hostname: str,
    now: datetime | None,
) -> Agent:
    with translate_errors():
        row = await db.fetchrow(QUERIES.check_in_agent, id, version, capabilities, hostname, now)
    return _agent(row)


async def sign_off_agent(db: Executor, id: UUID, now: datetime | None) -> None:
    with translate_errors():
        await db.execute(QUERIES.sign_off_agent, id, now)


async def touch_agent(db: Executor, id: UUID, now: datetime | None) -> None:
    with translate_errors():
        await db.execute(QUERIES.touch_agent, id, now)


async def list_workspace_agents(
    db: Executor,
    workspace_id: UUID,
    agent_id: UUID | None,
    after: tuple[str, UUID] | None,
    limit: int,
) -> list[Agent]:
    """By (name, id), after `after` (the last row of the previous page)."""
    name, after_id = after if after else (None, None)
    with translate_errors():
        rows = await db.fetch(
            QUERIES.list_workspace_agents, workspace_id, agent_id, name, limit, after_id
        )
    return [_agent(r) for r in rows]


async def agents_work(
    db: Executor, workspace_id: UUID, agent_ids: list[UUID]
) -> dict[UUID, AgentWork]:
    """What each of these agents of the workspace holds and has waiting."""
    with translate_errors():
        held = await db.fetch(QUERIES.agents_leased_tasks, workspace_id, agent_ids)
        queued = await db.fetch(QUERIES.agents_queued_tasks, workspace_id, agent_ids)
    running: dict[UUID, list[HeldTask]] = {}
    for r in held:
        running.setdefault(r["agent_id"], []).append(
            HeldTask(
                id=r["id"],
                job_id=r["job_id"],
                pipeline_id=r["pipeline_id"],
                kind=TaskKind(r["kind"]),
                attempt=r["attempt"],
                lease_expires_at=r["lease_expires_at"],
            )
        )
    waiting = {r["agent_id"]: int(r["queued"]) for r in queued}
    return {
        agent_id: AgentWork(tuple(running.get(agent_id, ())), waiting.get(agent_id, 0))
        for agent_id in agent_ids
    }


async def database_now(db: Executor, now: datetime | None) -> datetime:
    with translate_errors():
        value: datetime = await db.fetchval(QUERIES.database_now, now)
    return value


async def list_active_agents(db: Executor) -> list[Agent]:
    """Every active agent across workspaces: for the metrics, never for callers."""
    with translate_errors():
        return [_agent(r) for r in await db.fetch(QUERIES.list_active_agents)]
