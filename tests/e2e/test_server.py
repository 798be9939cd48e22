"""Server behaviour that every call shares: TLS, unexpected errors, request ids."""

from __future__ import annotations

import logging
from pathlib import Path

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from setu_client._proto.setu.v1 import jobs_pb2, jobs_pb2_grpc
from setu_client.channel import open_channel
from setu_server.service.jobs import JobService
from tests.certs import make_pki
from tests.factories import make_job, make_tenant
from tests.servers import in_process


async def test_tls_when_a_certificate_is_configured(database_url: str, tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    settings = {"tls_cert": str(pki.server.cert), "tls_key": str(pki.server.key)}
    async with in_process(database_url, **settings) as server:
        async with open_channel(
            f"localhost:{server.port}", root_certificates=pki.ca.read_bytes()
        ) as channel:
            answer = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        async with open_channel(f"localhost:{server.port}") as plaintext:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await health_pb2_grpc.HealthStub(plaintext).Check(
                    health_pb2.HealthCheckRequest(), timeout=5
                )
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_an_unexpected_error_is_internal_with_a_generic_message_and_logged(
    database_url: str,
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def explode(self: JobService, workspace_id: object, job_id: object) -> None:
        raise RuntimeError("disk on fire at /secret/path")

    monkeypatch.setattr(JobService, "get", explode)
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    caplog.set_level(logging.INFO)
    async with in_process(database_url) as server:
        async with open_channel(f"127.0.0.1:{server.port}", tenant.api_key) as channel:
            stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.GetJob(
                    jobs_pb2.GetJobRequest(job_id=str(job.id)),
                    metadata=(("x-request-id", "req-123"),),
                )
    assert info.value.code() == grpc.StatusCode.INTERNAL
    details = info.value.details() or ""
    assert "fire" not in details and "req-123" in details
    (record,) = [r for r in caplog.records if r.getMessage() == "unexpected error"]
    assert record.exc_info and "disk on fire" in str(record.exc_info[1])
    assert dict(info.value.trailing_metadata() or ()).get("x-request-id") == "req-123"
