"""What agents say about themselves."""

from __future__ import annotations

from uuid import UUID

from setu_client.clock import Clock
from setu_server.models import Agent
from setu_server.store import tenancy
from setu_server.store.db import Database


class AgentPresence:
    def __init__(self, pool: Database, clock: Clock) -> None:
        self._pool = pool
        self._clock = clock

    async def check_in(
        self, agent_id: UUID, version: str, capabilities: list[str], hostname: str
    ) -> Agent:
        return await tenancy.check_in_agent(
            self._pool,
            agent_id,
            version,
            sorted(set(capabilities)),
            hostname,
            self._clock.sql_now(),
        )
