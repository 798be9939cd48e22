"""HTTP/2 keepalive notices a silently dead peer, both ways: a client's
wait parked on a real server process that is stopped (SIGSTOP), on the
channel the SDK and the agent open (setu_client.channel.open_channel); and
a server's parked wait for a client that went silent behind a proxy."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from setu_client._client import LONG_POLL_MARGIN_SECONDS, SERVER_WAIT_CAP_SECONDS
from setu_client._proto.setu.v1 import jobs_pb2, jobs_pb2_grpc
from setu_client.channel import open_channel
from setu_server import server as server_module
from tests.factories import make_job, make_tenant
from tests.servers import in_process, server_process, wait_healthy


@pytest.mark.timeout(150)
async def test_a_wait_parked_on_a_stopped_server_ends_unavailable_not_at_its_deadline(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    env = {"SETU_DATABASE_URL": database_url, "SETU_WAIT_CAP_SECONDS": "3600"}
    with server_process(env, tmp_path / "server.log") as (proc, port):
        await wait_healthy(port)
        async with open_channel(f"127.0.0.1:{port}", tenant.api_key) as channel:
            stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
            request = jobs_pb2.GetJobRequest(job_id=str(job.id))
            await stub.GetJob(request, timeout=10)  # the connection is up
            # The SDK's own long-poll timeout: well above keepalive's budget
            # (a ping every 20 s, answered within 10 s), well below what a
            # ping timing out at grpc's default 60 s would take.
            wait = stub.WaitJob(
                jobs_pb2.WaitJobRequest(job_id=str(job.id)),
                timeout=SERVER_WAIT_CAP_SECONDS + LONG_POLL_MARGIN_SECONDS,
            )
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await wait
            finally:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()


class Blackhole:
    """A TCP proxy in front of a server that can go silent: once frozen it
    forwards nothing more either way and closes nothing, as a client host
    that stopped or a NAT that dropped the flow would look from the server."""

    def __init__(self, upstream: int) -> None:
        self._upstream = upstream
        self._frozen = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []
        self.port = 0

    def freeze(self) -> None:
        self._frozen.set()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while (data := await reader.read(65536)) and not self._frozen.is_set():
                writer.write(data)
                await writer.drain()
        await asyncio.Event().wait()  # hold both ends open until the test ends

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        self._writers += [writer, up_writer]
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Blackhole]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            for writer in self._writers:
                writer.transport.abort()
            server.close()


# The server's own ping settings (setu_server/server.py), ten times faster, so
# the test takes seconds: the behaviour is theirs, only the clock is shorter.
PING_TIMINGS = ("grpc.keepalive_time_ms", "grpc.keepalive_timeout_ms", "grpc.http2.ping_timeout_ms")


def faster(options: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
    return tuple((k, v // 10 if k in PING_TIMINGS else v) for k, v in options)


async def test_the_server_releases_a_wait_parked_by_a_client_gone_silent(
    database_url: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With its pings a server notices a silent client (stopped, or cut off
    without a FIN) within keepalive's time and timeout, ~40 s in production,
    and lets go of its parked wait; without them the wait is held until its
    cap (an hour here)."""
    monkeypatch.setattr(server_module, "GRPC_OPTIONS", faster(server_module.GRPC_OPTIONS))
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    async with in_process(database_url, wait_cap_seconds=3600.0, worker_processes=0) as server:
        parked = asyncio.Event()

        async def mark(job_id: uuid.UUID) -> None:
            parked.set()

        server.jobs.hooks.after_read = mark
        async with (
            Blackhole(server.port).running() as proxy,
            open_channel(f"127.0.0.1:{proxy.port}", tenant.api_key) as channel,
        ):
            stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
            wait = asyncio.ensure_future(stub.WaitJob(jobs_pb2.WaitJobRequest(job_id=str(job.id))))
            await asyncio.wait_for(parked.wait(), 30)
            assert server.hub.watched == 1
            proxy.freeze()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30  # well past 3 s + 1 s, well short of the cap
            while server.hub.watched:
                assert loop.time() < deadline, "the server still holds the silent client's wait"
                await asyncio.sleep(0.1)
            wait.cancel()
