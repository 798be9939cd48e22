"""A runtime learns that the server's own database is down, not the server:
over the wire the answer is UNAVAILABLE with its own reason, which keeps the
runtime's pauses short (tests/unit/test_runtime_backoff.py), so work
resumes as the database returns.

The server reaches its database through a link of the test's own (a TCP
relay to PostgreSQL's socket) that the test cuts and mends: nothing else of
the database server is touched."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg
import grpc
import pytest

from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc
from setu_client.channel import open_channel
from setu_client.errors import DatabaseUnavailable, from_rpc_error
from setu_server.server import Running
from tests.factories import Tenant, make_task, make_tenant
from tests.servers import in_process


class Link:
    """127.0.0.1:port -> PostgreSQL's unix socket; `cut()` drops every
    connection and refuses new ones until `mend()`."""

    def __init__(self, socket: Path) -> None:
        self._socket = socket
        self._cut = False
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()

    def cut(self) -> None:
        self._cut = True
        for writer in list(self._open):
            writer.close()

    def mend(self) -> None:
        self._cut = False

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_unix_connection(str(self._socket))
        self._open |= {writer, up_writer}
        try:
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            self._open -= {writer, up_writer}
            writer.close()
            up_writer.close()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    sink.close()


def _socket_of(url: str) -> tuple[Path, str]:
    parts = urlsplit(url)
    folder = parse_qs(parts.query).get("host", [""])[0]
    sockets = sorted(Path(folder).glob(".s.PGSQL.*")) if folder else []
    if not sockets or sockets[0].suffix == ".lock":
        pytest.skip("needs PostgreSQL on a unix socket (the embedded server)")
    return next(s for s in sockets if s.suffix != ".lock"), parts.path.lstrip("/")


@pytest.fixture
async def link(database_url: str) -> AsyncIterator[tuple[Link, str]]:
    socket, name = _socket_of(database_url)
    relay = Link(socket)
    await relay.start()
    try:
        yield relay, f"postgresql://postgres@127.0.0.1:{relay.port}/{name}"
    finally:
        await relay.stop()


@pytest.fixture
async def linked(link: tuple[Link, str]) -> AsyncIterator[Running]:
    async with in_process(link[1]) as running:
        yield running


async def test_a_lease_while_the_database_is_cut_says_so_and_works_once_it_is_back(
    link: tuple[Link, str], linked: Running, pool: asyncpg.Pool
) -> None:
    relay, _ = link
    tenant: Tenant = await make_tenant(pool)
    async with open_channel(f"127.0.0.1:{linked.port}", tenant.agent_token) as channel:
        agent = agents_pb2_grpc.AgentServiceStub(channel)
        await agent.CheckIn(pb.CheckInRequest())

        relay.cut()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=0), timeout=30)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        error = from_rpc_error(refused.value)
        assert isinstance(error, DatabaseUnavailable), (type(error), error.message)

        relay.mend()
        task = await make_task(pool, tenant)
        # The pool's broken connections go; a new one reaches the database.
        for _ in range(20):
            try:
                answer = await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5), timeout=30)
            except grpc.aio.AioRpcError as exc:
                assert isinstance(from_rpc_error(exc), DatabaseUnavailable)
                continue
            if answer.HasField("task"):
                break
        assert answer.task.id == str(task.id)
        assert uuid.UUID(answer.task.lease_token)
