"""Server behaviour that every call shares: TLS, unexpected errors, request ids."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import asyncpg
import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from setu_client._proto.setu.v1 import jobs_pb2, jobs_pb2_grpc
from setu_client.channel import open_channel
from setu_server.service.jobs import JobService
from tests.factories import make_job, make_tenant
from tests.servers import in_process


def _self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    # Certificate validity is about the test host's real clock, not domain time.
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_tls_when_a_certificate_is_configured(database_url: str, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    async with in_process(database_url, tls_cert=str(cert), tls_key=str(key)) as server:
        async with open_channel(
            f"localhost:{server.port}", root_certificates=cert.read_bytes()
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
