"""Connections: rows, reads, and the locks that keep pipelines' references sound."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from setu_server.models import Connection, Placement
from setu_server.store.db import Executor, translate_errors
from setu_server.store.queries import QUERIES


def connection_of(r: asyncpg.Record) -> Connection:
    return Connection(
        id=r["id"],
        workspace_id=r["workspace_id"],
        name=r["name"],
        provider=r["provider"],
        config=r["config"],
        placement=Placement(r["placement"]),
        agent_id=r["agent_id"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
    )


async def insert_connection(
    db: Executor,
    *,
    id: UUID,
    workspace_id: UUID,
    name: str,
    provider: str,
    config: dict[str, Any],
    placement: Placement,
    agent_id: UUID | None,
    now: datetime | None,
) -> Connection:
    """Raises AlreadyExists when the name is taken in the workspace."""
    with translate_errors():
        row = await db.fetchrow(
            QUERIES.insert_connection,
            id,
            workspace_id,
            name,
            provider,
            config,
            placement.value,
            agent_id,
            now,
        )
    return connection_of(row)


async def get_connection(db: Executor, id: UUID, workspace_id: UUID) -> Connection | None:
    with translate_errors():
        row = await db.fetchrow(QUERIES.get_connection, id, workspace_id)
    return connection_of(row) if row else None


async def lock_connection(
    db: asyncpg.Connection, id: UUID, workspace_id: UUID, *, to_delete: bool = False
) -> Connection | None:
    """The connection, locked until the transaction ends. `to_delete` also
    keeps new pipelines from referencing it meanwhile."""
    query = QUERIES.lock_connection_to_delete if to_delete else QUERIES.lock_connection
    with translate_errors():
        row = await db.fetchrow(query, id, workspace_id)
    return connection_of(row) if row else None


async def hold_connection(db: asyncpg.Connection, id: UUID, workspace_id: UUID) -> bool:
    """Whether it exists; if so it cannot be deleted before the transaction ends."""
    with translate_errors():
        return await db.fetchval(QUERIES.hold_connection, id, workspace_id) is not None


async def list_connections(
    db: Executor, workspace_id: UUID, *, provider: str, after: str | None, limit: int
) -> list[Connection]:
    with translate_errors():
        rows = await db.fetch(QUERIES.list_connections, workspace_id, provider, after, limit)
    return [connection_of(r) for r in rows]


async def update_connection(db: Executor, c: Connection, now: datetime | None) -> Connection | None:
    """Writes every mutable field of `c`; raises AlreadyExists for a taken name."""
    with translate_errors():
        row = await db.fetchrow(
            QUERIES.update_connection,
            c.id,
            c.workspace_id,
            c.name,
            c.provider,
            c.config,
            c.placement.value,
            c.agent_id,
            now,
        )
    return connection_of(row) if row else None


async def delete_connection(db: Executor, id: UUID, workspace_id: UUID) -> bool:
    with translate_errors():
        return await db.fetchval(QUERIES.delete_connection, id, workspace_id) is not None
