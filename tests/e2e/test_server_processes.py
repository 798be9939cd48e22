"""`setu-server --processes N` as real processes: N servers on one port, each
with its own watch hub and LISTEN session, supervised by one parent."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import psutil
import pytest

from setu_client._proto.setu.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    jobs_pb2,
    jobs_pb2_grpc,
)
from setu_client.channel import open_channel
from setu_server.rpc.interceptor import PROCESS_KEY
from setu_server.server import WAIT_READ_POINT
from tests.factories import make_job, make_tenant
from tests.pause import pause_point
from tests.servers import ADMIN_TOKEN, free_port, line_of, server_process, wait_healthy

# New connections land on one process or the other as the kernel hashes
# them; this many leave a miss of either at 2^-63.
ATTEMPTS = 64


Probe = Callable[[grpc.aio.Channel], Awaitable[str]]


async def _trailer(call: Any) -> str:
    """Which process answered `call`."""
    await call
    return str(dict(await call.trailing_metadata() or ())[PROCESS_KEY])


def _get_job(job_id: str) -> Probe:
    async def probe(channel: grpc.aio.Channel) -> str:
        stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
        return await _trailer(stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), timeout=30))

    return probe


def _list_keys(workspace_id: str) -> Probe:
    async def probe(channel: grpc.aio.Channel) -> str:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        request = admin_pb2.ListApiKeysRequest(workspace_id=workspace_id)
        return await _trailer(stub.ListApiKeys(request, timeout=30))

    return probe


@asynccontextmanager
async def pinned(port: int, token: str, probe: Probe) -> AsyncIterator[dict[str, grpc.aio.Channel]]:
    """A channel to each process, by its index: new connections (a channel
    of its own subchannel pool each) until both processes have one."""
    found: dict[str, grpc.aio.Channel] = {}
    async with AsyncExitStack() as stack:
        for _ in range(ATTEMPTS):
            channel = await stack.enter_async_context(
                open_channel(
                    f"127.0.0.1:{port}", token, options=[("grpc.use_local_subchannel_pool", 1)]
                )
            )
            found.setdefault(await probe(channel), channel)
            if len(found) == 2:
                break
        yield found


def _env(database_url: str, **more: str) -> dict[str, str]:
    return {
        "SETU_DATABASE_URL": database_url,
        "SETU_PROCESSES": "2",
        "SETU_WORKER_PROCESSES": "0",
        **more,
    }


async def test_two_processes_serve_one_port_and_stop_together(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    with server_process(_env(database_url), tmp_path / "server.log") as (parent, port):
        await wait_healthy(port)
        servers = psutil.Process(parent.pid).children()
        assert len(servers) == 2
        async with pinned(port, tenant.api_key, _get_job(str(job.id))) as channels:
            assert sorted(channels) == ["0", "1"]
        parent.terminate()
        assert await asyncio.to_thread(parent.wait, 30) == 0
        # SIGTERM to the parent drained both servers, not only itself.
        _, alive = await asyncio.to_thread(psutil.wait_procs, servers, 10)
        assert alive == []


async def test_a_wait_parked_on_one_process_wakes_on_a_cancel_through_the_other(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    async with pause_point(tmp_path / "pause", WAIT_READ_POINT) as paused:
        await paused.arm()
        # Hour-long caps and re-checks: only the NOTIFY can end the wait in time.
        env = _env(
            database_url,
            SETU_TEST_PAUSE=paused.setting,
            SETU_WATCH_RECHECK_SECONDS="3600",
            SETU_WAIT_CAP_SECONDS="3600",
        )
        with server_process(env, tmp_path / "server.log") as (_, port):
            await wait_healthy(port)
            async with pinned(port, tenant.api_key, _get_job(str(job.id))) as channels:
                waiting_on = jobs_pb2_grpc.JobOrchestrationServiceStub(channels["0"])
                cancelling_on = jobs_pb2_grpc.JobOrchestrationServiceStub(channels["1"])
                wait = waiting_on.WaitJob(jobs_pb2.WaitJobRequest(job_id=str(job.id)), timeout=90)
                # Process 0 has subscribed to the job and read it PENDING.
                await paused.reached()
                cancel = cancelling_on.CancelJob(
                    jobs_pb2.CancelJobRequest(job_id=str(job.id), reason="through process 1")
                )
                await cancel
                assert dict(await cancel.trailing_metadata() or ())[PROCESS_KEY] == "1"
                paused.resume()
                answer = await asyncio.wait_for(wait, 30)
                assert dict(await wait.trailing_metadata() or ())[PROCESS_KEY] == "0"
    assert answer.state == common_pb2.JOB_STATE_CANCELLED


async def test_a_key_revoked_through_one_process_is_refused_at_once_by_the_other(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    # An hour: only the revocation's announcement can end the remembered key.
    env = _env(database_url, SETU_AUTH_CACHE_SECONDS="3600")
    with server_process(env, tmp_path / "server.log") as (_, port):
        await wait_healthy(port)
        workspace = str(tenant.workspace_id)
        async with (
            pinned(port, tenant.api_key, _get_job(str(job.id))) as client,
            pinned(port, ADMIN_TOKEN, _list_keys(workspace)) as admin,
        ):
            stub = admin_pb2_grpc.AdminServiceStub(admin["1"])
            keys = await stub.ListApiKeys(admin_pb2.ListApiKeysRequest(workspace_id=workspace))
            await stub.RevokeApiKey(admin_pb2.RevokeApiKeyRequest(api_key_id=keys.api_keys[0].id))
            for index in ("0", "1"):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await _get_job(str(job.id))(client[index])
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
                trailers = dict(refused.value.trailing_metadata() or ())
                assert trailers[PROCESS_KEY] == index


async def test_a_server_of_one_process_names_no_process(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    env = {"SETU_DATABASE_URL": database_url, "SETU_PROCESSES": "1"}
    with server_process(env, tmp_path / "server.log") as (parent, port):
        await wait_healthy(port)
        assert psutil.Process(parent.pid).cmdline()[-1] == "setu_server.main"
        async with open_channel(f"127.0.0.1:{port}", tenant.api_key) as channel:
            stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
            call = stub.GetJob(jobs_pb2.GetJobRequest(job_id=str(job.id)), timeout=30)
            await call
            assert PROCESS_KEY not in dict(await call.trailing_metadata() or ())


async def test_a_process_that_dies_after_serving_is_started_again(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    port = free_port()
    env = (
        os.environ
        | _env(database_url)
        | {"SETU_LISTEN": f"127.0.0.1:{port}", "SETU_HTTP_LISTEN": "127.0.0.1:0"}
    )
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setu_server.main",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert parent.stdout is not None
    said: list[str] = []
    try:
        await asyncio.wait_for(line_of(parent.stdout, "setu-server processes: 2", said), 60)
        (second,) = [
            child
            for child in psutil.Process(parent.pid).children()
            if "--process-index 1 " in " ".join(child.cmdline()) + " "
        ]
        second.kill()
        await asyncio.wait_for(line_of(parent.stdout, "restarting it", said), 60)
        again = await asyncio.wait_for(line_of(parent.stdout, "serving again", said), 60)
        assert '"process_index": 1' in again
        async with pinned(port, tenant.api_key, _get_job(str(job.id))) as channels:
            assert sorted(channels) == ["0", "1"], "both serve the port again"
    except TimeoutError:
        raise AssertionError(f"setu-server said {said}") from None
    finally:
        parent.terminate()
        await asyncio.wait_for(parent.communicate(), 60)
    assert parent.returncode == 0, said
