"""Every kind of credential against every kind of service, with exact codes."""

from __future__ import annotations

import logging
import uuid

import asyncpg
import grpc
import pytest

from setu_client._proto.setu.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    agents_pb2,
    agents_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
)
from setu_client.channel import open_channel
from setu_client.clock import SystemClock
from setu_server.server import Running
from setu_server.service.admin import AdminService
from tests.factories import Tenant, make_job, make_tenant
from tests.servers import ADMIN_TOKEN

Code = grpc.StatusCode


async def _get_job(port: int, token: str | None, job_id: str, raw_header: str | None = None):  # type: ignore[no-untyped-def]
    metadata = (("authorization", raw_header),) if raw_header else None
    async with open_channel(f"127.0.0.1:{port}", token) as channel:
        stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
        return await stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=metadata)


async def _code_of(call) -> Code:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value.code()


async def test_a_workspace_key_reads_its_own_job(server: Running, pool: asyncpg.Pool) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    answer = await _get_job(server.port, tenant.api_key, str(job.id))
    assert answer.job.id == str(job.id)


@pytest.mark.parametrize(
    ("token", "header"),
    [
        (None, None),
        (None, "Basic dXNlcjpwYXNz"),
        (None, "Bearer"),
        ("setu_ak_not-a-real-key", None),
        ("some-random-token", None),
        ("setu_ag_not-a-real-agent", None),
        ("setu_adm_not-the-admin-token", None),
    ],
    ids=["none", "basic", "empty-bearer", "unknown-key", "no-prefix", "unknown-agent", "bad-admin"],
)
async def test_missing_or_unknown_credentials_are_unauthenticated(
    server: Running, pool: asyncpg.Pool, token: str | None, header: str | None
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    assert await _code_of(_get_job(server.port, token, str(job.id), header)) == Code.UNAUTHENTICATED


async def test_another_workspaces_job_is_not_found(server: Running, pool: asyncpg.Pool) -> None:
    owner, stranger = await make_tenant(pool), await make_tenant(pool)
    job = await make_job(pool, owner.workspace_id)
    assert await _code_of(_get_job(server.port, stranger.api_key, str(job.id))) == Code.NOT_FOUND
    missing = str(uuid.uuid4())
    assert await _code_of(_get_job(server.port, owner.api_key, missing)) == Code.NOT_FOUND


async def test_agent_token_on_a_client_service_is_permission_denied(
    server: Running, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    code = await _code_of(_get_job(server.port, tenant.agent_token, str(job.id)))
    assert code == Code.PERMISSION_DENIED


async def test_admin_token_on_a_client_service_is_permission_denied(
    server: Running, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    assert await _code_of(_get_job(server.port, ADMIN_TOKEN, str(job.id))) == Code.PERMISSION_DENIED


async def _check_in(port: int, token: str) -> agents_pb2.CheckInResponse:
    async with open_channel(f"127.0.0.1:{port}", token) as channel:
        stub = agents_pb2_grpc.AgentServiceStub(channel)
        return await stub.CheckIn(agents_pb2.CheckInRequest(version="t"))


async def test_client_key_on_the_agent_service_is_permission_denied(
    server: Running, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    assert await _code_of(_check_in(server.port, tenant.api_key)) == Code.PERMISSION_DENIED
    answer = await _check_in(server.port, tenant.agent_token)
    assert answer.agent_id == str(tenant.agent_id)


async def test_client_and_agent_credentials_on_the_admin_service_are_denied(
    server: Running, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    for token in (tenant.api_key, tenant.agent_token):
        async with open_channel(f"127.0.0.1:{server.port}", token) as channel:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            code = await _code_of(stub.ListWorkspaces(admin_pb2.ListWorkspacesRequest()))
            assert code == Code.PERMISSION_DENIED


async def test_revoked_key_and_deactivated_agent_are_unauthenticated(
    server: Running, pool: asyncpg.Pool
) -> None:
    tenant: Tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    admin = AdminService(pool, SystemClock())
    key_id = (await admin.list_api_keys(tenant.workspace_id))[0].id
    await admin.revoke_api_key(key_id)
    await admin.deactivate_agent(tenant.agent_id)
    assert await _code_of(_get_job(server.port, tenant.api_key, str(job.id))) == (
        Code.UNAUTHENTICATED
    )
    assert await _code_of(_check_in(server.port, tenant.agent_token)) == Code.UNAUTHENTICATED


async def test_an_unknown_key_or_agent_token_is_named_in_plain_words(
    server: Running, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    for token, noun in (
        ("setu_ak_no-such-key", "API key"),
        ("setu_ag_no-such-agent", "agent token"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _get_job(server.port, token, str(job.id))
        assert info.value.details() == f"this {noun} is unknown or has been revoked"


async def test_no_credential_is_ever_logged(
    server: Running, pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    await _get_job(server.port, tenant.api_key, str(job.id))
    await _code_of(_get_job(server.port, tenant.agent_token, str(job.id)))
    await _code_of(_get_job(server.port, "setu_ak_wrong-secret-value", str(job.id)))
    logged = "\n".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert "call" in logged, "the access log should have recorded the calls"
    for secret in (tenant.api_key, tenant.agent_token, "wrong-secret-value", ADMIN_TOKEN):
        assert secret not in logged
