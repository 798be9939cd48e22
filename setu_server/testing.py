"""A real Setu server inside a test process, for tests written against the SDK.

    async with local_server(clock=FakeClock()) as server:
        async with SetuClient(server.address, server.api_key) as client:
            job = await client.submit_run(pipeline_id)

The server is the real one (gRPC on a free port, the store, the watch hub,
the cloud worker), on the PostgreSQL you name or on an embedded one started
in a scratch folder. The clock you pass is the server's only source of wall
time, so a `FakeClock` makes every timestamp it writes predictable; pair it
with a paused event-loop clock (looptime, say) for the waits and caps.
"""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

from setu_client.clock import Clock
from setu_server.config import Settings
from setu_server.server import Running, database_url, start
from setu_server.service.secrets import TokenKind, new_secret


def settings_for_tests(**overrides: object) -> Settings:
    """Settings for a server under test: free ports on 127.0.0.1 (gRPC and
    the monitor's HTTP), a fresh admin token, and a short shutdown grace;
    `overrides` (fields, sections or the flat names users set) win."""
    base = Settings(
        listen="127.0.0.1:0",
        http_listen="127.0.0.1:0",
        admin_token=new_secret(TokenKind.ADMIN).token,
        grace_seconds=1.0,
    )
    return base.updated(**overrides)


@contextlib.asynccontextmanager
async def in_process(
    database_url: str, clock: Clock | None = None, **overrides: object
) -> AsyncIterator[Running]:
    """The server on `database_url` (migrated on start), stopped on exit.

    `overrides` are Settings fields. `Running` gives the port, the
    monitor's `http_url` and, for tests that reach inside, the server's
    services."""
    running = await start(settings_for_tests(**overrides), database_url, clock)
    try:
        yield running
    finally:
        await running.stop(grace=0.5)


@dataclass(frozen=True)
class Credentials:
    """A workspace and an API key of it: what a SetuClient needs."""

    workspace_id: str
    api_key: str


@dataclass(frozen=True)
class LocalServer:
    """A running server, where to reach it, and one workspace ready to use."""

    running: Running
    address: str
    admin_token: str
    workspace_id: str
    api_key: str

    @property
    def http_url(self) -> str:
        """The run monitor's URL (sign in with `api_key`)."""
        return self.running.http_url

    async def new_workspace(self, name: str | None = None) -> Credentials:
        """Another tenant, for tests that need two."""
        return await _workspace(self.running, name)


async def _workspace(running: Running, name: str | None) -> Credentials:
    admin = running.services.admin
    workspace = await admin.create_workspace(name or f"test-{uuid.uuid4().hex[:8]}")
    key = await admin.create_api_key(workspace.id, "test")
    return Credentials(str(workspace.id), key.secret)


@contextlib.asynccontextmanager
async def local_server(
    database_url: str | None = None, clock: Clock | None = None, **overrides: object
) -> AsyncIterator[LocalServer]:
    """A server for the length of the block, with a fresh workspace.

    Without `database_url` it starts an embedded PostgreSQL in a scratch
    folder (slower: seconds, once per call) and deletes it afterwards.
    """
    async with contextlib.AsyncExitStack() as stack:
        if "data_dir" not in overrides:  # blobs (and an embedded database) go here
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="setu-test-"))
            overrides.setdefault("data_dir", Path(folder))
        settings = settings_for_tests(**overrides)
        url = database_url or await _embedded(settings, stack)
        running = await stack.enter_async_context(
            in_process(url, clock, **(overrides | {"admin_token": settings.admin_token}))
        )
        credentials = await _workspace(running, None)
        yield LocalServer(
            running=running,
            address=f"127.0.0.1:{running.port}",
            admin_token=settings.admin_token,
            workspace_id=credentials.workspace_id,
            api_key=credentials.api_key,
        )


async def _embedded(settings: Settings, stack: contextlib.AsyncExitStack) -> str:
    return await database_url(replace(settings, database_url=""), stack)
