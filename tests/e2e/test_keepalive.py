"""HTTP/2 keepalive notices a silently dead peer: a real server process,
stopped (SIGSTOP) with a WaitJob parked on it, on the channel the SDK and the
agent open (setu_client.channel.open_channel)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import asyncpg
import grpc
import pytest

from setu_client._client import LONG_POLL_MARGIN_SECONDS, SERVER_WAIT_CAP_SECONDS
from setu_client._proto.setu.v1 import jobs_pb2, jobs_pb2_grpc
from setu_client.channel import open_channel
from tests.factories import make_job, make_tenant
from tests.servers import server_process, wait_healthy


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
