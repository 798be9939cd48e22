"""What waits on an agent: read when it signs off, so the jobs it leaves
waiting say so on their timelines (setu_server/service/agents.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from setu_server.models import JobKind
from setu_server.store.db import Executor, translate_errors
from setu_server.store.queries import QUERIES


@dataclass(frozen=True)
class SignOffState:
    name: str
    signed_off_at: datetime | None


@dataclass(frozen=True)
class WaitingJob:
    job_id: UUID
    kind: JobKind
    # Every task of the job on the agent is leased (none merely queued).
    running: bool


async def lock_agent_for_sign_off(db: Executor, agent_id: UUID) -> SignOffState | None:
    """The agent's sign-off as it was, its row locked for the caller's transaction."""
    with translate_errors():
        row = await db.fetchrow(QUERIES.lock_agent_for_sign_off, agent_id)
    return SignOffState(row["name"], row["signed_off_at"]) if row else None


async def jobs_waiting_on_agent(db: Executor, agent_id: UUID) -> list[WaitingJob]:
    with translate_errors():
        rows = await db.fetch(QUERIES.jobs_waiting_on_agent, str(agent_id))
    return [WaitingJob(r["job_id"], JobKind(r["kind"]), r["running"]) for r in rows]
