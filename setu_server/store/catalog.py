"""The catalog: streams a connection offers, kept by discover."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from setu_server.store.db import Executor, translate_errors
from setu_server.store.queries import QUERIES


def _stream(r: asyncpg.Record) -> dict[str, Any]:
    return {
        "namespace": r["namespace"],
        "name": r["name"],
        "columns": r["columns"],
        "primary_key": list(r["primary_key"]),
        "row_estimate": r["row_estimate"],
        "status": r["status"],
        "discovered_at": r["discovered_at"].isoformat(),
    }


async def record_discovery(
    db: Executor, connection_id: UUID, streams: list[dict[str, Any]], now: datetime | None
) -> list[dict[str, Any]]:
    """Adds new streams, updates changed ones, marks the unseen missing;
    returns the whole catalog."""
    seen: list[str] = []
    with translate_errors():
        for s in streams:
            namespace = str(s.get("namespace", ""))
            await db.execute(
                QUERIES.upsert_catalog_stream,
                connection_id,
                namespace,
                str(s["name"]),
                list(s.get("columns", [])),
                [str(k) for k in s.get("primary_key", [])],
                int(s.get("row_estimate", 0)),
                now,
            )
            seen.append(f"{namespace}.{s['name']}")
        await db.execute(QUERIES.mark_missing_catalog_streams, connection_id, seen)
        rows = await db.fetch(QUERIES.list_catalog_streams, connection_id)
    return [_stream(r) for r in rows]


async def offered_streams(db: Executor, connection_id: UUID) -> list[dict[str, Any]]:
    """The streams the connection's last discover saw (none if it was never
    discovered): namespace, name, columns, primary_key, row_estimate."""
    with translate_errors():
        rows = await db.fetch(QUERIES.list_catalog_streams, connection_id)
    return [_stream(r) for r in rows if r["status"] != "missing"]
