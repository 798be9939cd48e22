"""Tenants and credentials: workspaces, API keys, agents."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar
from uuid import UUID

from setu_client.clock import Clock
from setu_client.errors import AlreadyExists, NotFound
from setu_server.models import Agent, ApiKey, Workspace
from setu_server.service.secrets import TokenKind, new_secret
from setu_server.store import tenancy
from setu_server.store.db import Database

T = TypeVar("T")


@dataclass(frozen=True)
class Created(Generic[T]):
    """A new object and its secret, which is shown only this once."""

    value: T
    secret: str


class AgentTasks(Protocol):
    async def fail_runtime(self, runtime: str, reason: str) -> int: ...


class AdminService:
    def __init__(
        self,
        pool: Database,
        clock: Clock,
        tasks: AgentTasks | None = None,
        credentials_changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._tasks = tasks
        self._credentials_changed = credentials_changed

    async def create_workspace(self, name: str) -> Workspace:
        try:
            return await tenancy.insert_workspace(
                self._pool, uuid.uuid4(), name, self._clock.sql_now()
            )
        except AlreadyExists:
            raise AlreadyExists(f"a workspace named {name!r} already exists") from None

    async def get_workspace(self, workspace_id: UUID) -> Workspace:
        workspace = await tenancy.get_workspace(self._pool, workspace_id)
        if workspace is None:
            raise NotFound(f"workspace {workspace_id} not found")
        return workspace

    async def find_workspace(self, name: str) -> Workspace | None:
        return await tenancy.get_workspace_by_name(self._pool, name)

    async def list_workspaces(self) -> list[Workspace]:
        return await tenancy.list_workspaces(self._pool)

    async def create_api_key(self, workspace_id: UUID, name: str) -> Created[ApiKey]:
        await self.get_workspace(workspace_id)
        secret = new_secret(TokenKind.API_KEY)
        key = await tenancy.insert_api_key(
            self._pool,
            uuid.uuid4(),
            workspace_id,
            name,
            secret.prefix,
            secret.digest,
            self._clock.sql_now(),
        )
        return Created(key, secret.token)

    async def list_api_keys(self, workspace_id: UUID) -> list[ApiKey]:
        await self.get_workspace(workspace_id)
        return await tenancy.list_api_keys(self._pool, workspace_id)

    async def revoke_api_key(self, api_key_id: UUID) -> ApiKey:
        key = await tenancy.revoke_api_key(self._pool, api_key_id, self._clock.sql_now())
        if key is None:
            raise NotFound(f"API key {api_key_id} not found")
        self._credentials_changed()
        return key

    async def create_agent(self, workspace_id: UUID, name: str) -> Created[Agent]:
        await self.get_workspace(workspace_id)
        secret = new_secret(TokenKind.AGENT)
        try:
            agent = await tenancy.insert_agent(
                self._pool, uuid.uuid4(), workspace_id, name, secret.digest, self._clock.sql_now()
            )
        except AlreadyExists:
            raise AlreadyExists(f"an agent named {name!r} already exists here") from None
        return Created(agent, secret.token)

    async def get_agent(self, agent_id: UUID) -> Agent:
        agent = await tenancy.get_agent(self._pool, agent_id)
        if agent is None:
            raise NotFound(f"agent {agent_id} not found")
        return agent

    async def list_agents(self, workspace_id: UUID) -> list[Agent]:
        await self.get_workspace(workspace_id)
        return await tenancy.list_agents(self._pool, workspace_id)

    async def deactivate_agent(self, agent_id: UUID) -> Agent:
        """Its token stops working; what was queued for it or held by it fails
        its job, naming the agent, rather than waiting for a runtime that will
        never come."""
        agent = await tenancy.deactivate_agent(self._pool, agent_id)
        if agent is None:
            raise NotFound(f"agent {agent_id} not found")
        self._credentials_changed()
        if self._tasks is not None:
            await self._tasks.fail_runtime(
                str(agent.id),
                f"agent {agent.name!r} ({agent.id}) was deactivated; place the connection on "
                "an active agent and run again",
            )
        return agent

    async def now(self) -> datetime:
        return await tenancy.database_now(self._pool, self._clock.sql_now())
