"""Remembered credentials: a checked credential costs no query for a while,
and a revocation still refuses the very next call, on every replica."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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
from tests.servers import ADMIN_TOKEN, in_process

Code = grpc.StatusCode
# An hour: only a revocation's announcement can end a remembered answer in a test.
HOUR = 3600.0


async def _get_job(server: Running, key: str, job_id: str) -> Code:
    async with open_channel(f"127.0.0.1:{server.port}", key) as channel:
        stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
        try:
            await stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), timeout=30)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return Code.OK


async def _check_in(server: Running, token: str) -> Code:
    async with open_channel(f"127.0.0.1:{server.port}", token) as channel:
        stub = agents_pb2_grpc.AgentServiceStub(channel)
        try:
            await stub.CheckIn(agents_pb2.CheckInRequest(version="1"), timeout=30)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return Code.OK


@asynccontextmanager
async def _admin(server: Running) -> AsyncIterator[admin_pb2_grpc.AdminServiceStub]:
    async with open_channel(f"127.0.0.1:{server.port}", ADMIN_TOKEN) as channel:
        yield admin_pb2_grpc.AdminServiceStub(channel)


@pytest.mark.parametrize("cache_seconds", [HOUR, 0.0])
async def test_a_checked_key_is_remembered_for_the_cache_seconds(
    database_url: str, pool: asyncpg.Pool, cache_seconds: float
) -> None:
    tenant: Tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    async with in_process(database_url, auth_cache_seconds=cache_seconds) as server:
        assert await _get_job(server, tenant.api_key, str(job.id)) == Code.OK
        # Revoked behind every server's back (no announcement): only a server
        # that looks the key up again sees it.
        admin = AdminService(pool, SystemClock())
        (key,) = await admin.list_api_keys(tenant.workspace_id)
        await admin.revoke_api_key(key.id)
        expected = Code.OK if cache_seconds else Code.UNAUTHENTICATED
        assert await _get_job(server, tenant.api_key, str(job.id)) == expected


async def test_a_key_revoked_through_one_replica_is_refused_at_once_by_both(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    async with (
        in_process(database_url, auth_cache_seconds=HOUR) as a,
        in_process(database_url, auth_cache_seconds=HOUR) as b,
    ):
        for server in (a, b):  # remembered on both
            assert await _get_job(server, tenant.api_key, str(job.id)) == Code.OK
        async with _admin(a) as admin:
            keys = await admin.ListApiKeys(
                admin_pb2.ListApiKeysRequest(workspace_id=str(tenant.workspace_id))
            )
            revoke = admin_pb2.RevokeApiKeyRequest(api_key_id=keys.api_keys[0].id)
            await admin.RevokeApiKey(revoke)
        assert await _get_job(a, tenant.api_key, str(job.id)) == Code.UNAUTHENTICATED
        assert await _get_job(b, tenant.api_key, str(job.id)) == Code.UNAUTHENTICATED


async def test_an_agent_deactivated_through_one_replica_is_refused_at_once_by_both(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    async with (
        in_process(database_url, auth_cache_seconds=HOUR) as a,
        in_process(database_url, auth_cache_seconds=HOUR) as b,
    ):
        for server in (a, b):
            assert await _check_in(server, tenant.agent_token) == Code.OK
        async with _admin(b) as admin:
            deactivate = admin_pb2.DeactivateAgentRequest(agent_id=str(tenant.agent_id))
            await admin.DeactivateAgent(deactivate)
        assert await _check_in(b, tenant.agent_token) == Code.UNAUTHENTICATED
        assert await _check_in(a, tenant.agent_token) == Code.UNAUTHENTICATED
