"""Connections: a provider, its config and where it executes (docs/flows.md).

Configs are validated by the engine's own providers, on the config as
stored: secret references stay references, never resolved here.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from setu_client.clock import Clock
from setu_client.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from setu_engine.errors import ConfigError
from setu_engine.providers import validate_config
from setu_server.models import Connection, Placement
from setu_server.service import paging
from setu_server.store import connections, pipelines, tenancy
from setu_server.store.db import Database, Executor, transaction

ConfigValidator = Callable[[str, dict[str, Any]], None]
T = TypeVar("T")

NAME_MAX = 200
PROVIDER_MAX = 50
DEFAULT_PAGE_SIZE = 50


@dataclass(frozen=True)
class ConnectionDraft:
    """A connection's mutable fields, as a caller asks for them."""

    name: str
    provider: str
    config: dict[str, Any]
    placement: Placement = Placement.CLOUD
    agent_id: UUID | None = None


MUTABLE_FIELDS = tuple(f.name for f in dataclasses.fields(ConnectionDraft))


def merge_fields(current: T, changes: T, paths: Sequence[str], allowed: Sequence[str]) -> T:
    """`current` with the fields named in `paths` taken from `changes`; all of
    `allowed` when `paths` is empty. An unknown path is INVALID_ARGUMENT."""
    unknown = [p for p in paths if p not in allowed]
    if unknown:
        raise InvalidArgument(
            f"update_mask: unknown field {unknown[0]!r}; use any of {', '.join(allowed)}"
        )
    fields = {p: getattr(changes, p) for p in (paths or allowed)}
    merged: T = dataclasses.replace(current, **fields)  # type: ignore[type-var]  # a dataclass
    return merged


def check_name(name: str) -> None:
    if not name.strip():
        raise InvalidArgument("name: required")
    if len(name) > NAME_MAX:
        raise InvalidArgument(f"name: at most {NAME_MAX} characters")


class ConnectionService:
    def __init__(
        self, pool: Database, clock: Clock, validator: ConfigValidator = validate_config
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._validate_config = validator

    async def create(
        self, workspace_id: UUID, draft: ConnectionDraft, *, validate_only: bool = False
    ) -> Connection:
        """The new connection. With `validate_only` the same checks and the
        same insert run in a transaction that is rolled back: the answer is
        what would be written, and nothing is."""
        async with transaction(self._pool, commit=not validate_only) as conn:
            return await self.insert(conn, workspace_id, draft)

    async def insert(self, db: Executor, workspace_id: UUID, draft: ConnectionDraft) -> Connection:
        """Checks `draft` and inserts it on `db`, so a caller's transaction
        can hold it (a pipeline validated with a connection not yet made)."""
        await self._check(db, workspace_id, draft)
        try:
            return await connections.insert_connection(
                db,
                id=uuid.uuid4(),
                workspace_id=workspace_id,
                name=draft.name,
                provider=draft.provider,
                config=draft.config,
                placement=draft.placement,
                agent_id=draft.agent_id,
                now=self._clock.sql_now(),
            )
        except AlreadyExists:
            raise _name_taken(draft.name) from None

    async def get(self, workspace_id: UUID, connection_id: UUID) -> Connection:
        found = await connections.get_connection(self._pool, connection_id, workspace_id)
        if found is None:
            raise _not_found(connection_id)
        return found

    async def list_connections(
        self, workspace_id: UUID, provider: str, page_size: int, page_token: str
    ) -> tuple[list[Connection], str]:
        query = repr(("connections", workspace_id, provider))
        position = paging.decode(page_token, query)
        after = str(position["name"]) if position else None
        size = page_size or DEFAULT_PAGE_SIZE
        found = await connections.list_connections(
            self._pool, workspace_id, provider=provider, after=after, limit=size + 1
        )
        page, more = found[:size], len(found) > size
        token = paging.encode({"name": page[-1].name}, query) if more else ""
        return page, token

    async def update(
        self,
        workspace_id: UUID,
        connection_id: UUID,
        changes: ConnectionDraft,
        paths: Sequence[str],
        *,
        validate_only: bool = False,
    ) -> Connection:
        """Replaces the fields named in `paths` (all mutable ones when empty),
        then validates the connection that results as a whole; with
        `validate_only`, rolled back after the write."""
        async with transaction(self._pool, commit=not validate_only) as conn:
            current = await connections.lock_connection(conn, connection_id, workspace_id)
            if current is None:
                raise _not_found(connection_id)
            draft = merge_fields(_draft_of(current), changes, paths, MUTABLE_FIELDS)
            await self._check(conn, workspace_id, draft)
            wanted = dataclasses.replace(current, **dataclasses.asdict(draft))
            try:
                updated = await connections.update_connection(conn, wanted, self._clock.sql_now())
            except AlreadyExists:
                raise _name_taken(draft.name) from None
        assert updated is not None, "the row is locked"
        return updated

    async def delete(self, workspace_id: UUID, connection_id: UUID) -> None:
        async with transaction(self._pool) as conn:
            found = await connections.lock_connection(
                conn, connection_id, workspace_id, to_delete=True
            )
            if found is None:
                raise _not_found(connection_id)
            users = await pipelines.pipelines_using_connection(conn, connection_id)
            if users:
                raise FailedPrecondition(
                    f"connection {connection_id} is used by pipeline(s) {', '.join(users)}; "
                    "delete or change them first"
                )
            await connections.delete_connection(conn, connection_id, workspace_id)

    async def _check(self, db: Executor, workspace_id: UUID, draft: ConnectionDraft) -> None:
        check_name(draft.name)
        if len(draft.provider) > PROVIDER_MAX:
            raise InvalidArgument(f"provider: at most {PROVIDER_MAX} characters")
        try:
            self._validate_config(draft.provider, draft.config)
        except ConfigError as exc:
            raise InvalidArgument(str(exc)) from None
        await self._check_placement(db, workspace_id, draft)

    async def _check_placement(
        self, db: Executor, workspace_id: UUID, draft: ConnectionDraft
    ) -> None:
        if draft.placement is Placement.CLOUD:
            if draft.agent_id is not None:
                raise InvalidArgument("agent_id: only a connection placed AGENT names an agent")
            return
        if draft.agent_id is None:
            raise InvalidArgument("agent_id: required when placement is AGENT")
        agent = await tenancy.get_agent(db, draft.agent_id)
        if agent is None or agent.workspace_id != workspace_id:
            raise NotFound(f"agent {draft.agent_id} not found")


def _draft_of(c: Connection) -> ConnectionDraft:
    return ConnectionDraft(c.name, c.provider, c.config, c.placement, c.agent_id)


def _not_found(connection_id: UUID) -> NotFound:
    return NotFound(f"connection {connection_id} not found")


def _name_taken(name: str) -> AlreadyExists:
    return AlreadyExists(f"a connection named {name!r} already exists in this workspace")
