"""AdminService over real gRPC: tenants, keys shown once and stored hashed, agents."""

from __future__ import annotations

import asyncpg
import grpc
import pytest

from setu_client._proto.setu.v1 import admin_pb2 as apb
from setu_client._proto.setu.v1 import (
    admin_pb2_grpc,
    agents_pb2,
    agents_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
)
from setu_client.admin import AdminClient
from setu_client.channel import open_channel
from setu_client.errors import AlreadyExists, NotFound
from tests.servers import ADMIN_TOKEN, in_process


@pytest.fixture
async def admin(database_url: str):  # type: ignore[no-untyped-def]
    async with in_process(database_url) as server:
        async with open_channel(f"127.0.0.1:{server.port}", ADMIN_TOKEN) as channel:
            yield server.port, admin_pb2_grpc.AdminServiceStub(channel)


async def test_workspace_lifecycle(admin) -> None:  # type: ignore[no-untyped-def]
    _, stub = admin
    created = await stub.CreateWorkspace(apb.CreateWorkspaceRequest(name="acme"))
    assert (
        await stub.GetWorkspace(apb.GetWorkspaceRequest(workspace_id=created.id))
    ).name == "acme"
    listed = await stub.ListWorkspaces(apb.ListWorkspacesRequest())
    assert [w.name for w in listed.workspaces] == ["acme"]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.CreateWorkspace(apb.CreateWorkspaceRequest(name="acme"))
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "acme" in (info.value.details() or "")


async def test_api_key_is_shown_once_stored_hashed_and_works(
    admin,
    pool: asyncpg.Pool,  # type: ignore[no-untyped-def]
) -> None:
    port, stub = admin
    ws = await stub.CreateWorkspace(apb.CreateWorkspaceRequest(name="acme"))
    created = await stub.CreateApiKey(apb.CreateApiKeyRequest(workspace_id=ws.id, name="ci"))
    assert created.secret.startswith(created.api_key.prefix)
    listed = await stub.ListApiKeys(apb.ListApiKeysRequest(workspace_id=ws.id))
    assert created.secret not in str(listed)

    dump = str(await pool.fetch("SELECT * FROM api_key"))
    assert created.secret not in dump

    async with open_channel(f"127.0.0.1:{port}", created.secret) as channel:
        jobs = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await jobs.GetJob(jobs_pb2.GetJobRequest(job_id="0b4f5e2c-1b7e-4f0e-9a55-3c2d1e0f9a11"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND  # authenticated, job unknown

    revoked = await stub.RevokeApiKey(apb.RevokeApiKeyRequest(api_key_id=created.api_key.id))
    again = await stub.RevokeApiKey(apb.RevokeApiKeyRequest(api_key_id=created.api_key.id))
    assert revoked.revoked_at == again.revoked_at, "revoking is idempotent"

    # The key was just used (and is remembered); revocation still bites at once.
    async with open_channel(f"127.0.0.1:{port}", created.secret) as channel:
        jobs = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await jobs.GetJob(jobs_pb2.GetJobRequest(job_id="0b4f5e2c-1b7e-4f0e-9a55-3c2d1e0f9a11"))
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_agent_token_is_shown_once_and_check_in_makes_it_online(
    admin,
    pool: asyncpg.Pool,  # type: ignore[no-untyped-def]
) -> None:
    port, stub = admin
    ws = await stub.CreateWorkspace(apb.CreateWorkspaceRequest(name="acme"))
    created = await stub.CreateAgent(apb.CreateAgentRequest(workspace_id=ws.id, name="edge-1"))
    assert not created.agent.online
    assert created.token not in str(await pool.fetch("SELECT * FROM agent"))

    async with open_channel(f"127.0.0.1:{port}", created.token) as channel:
        agents = agents_pb2_grpc.AgentServiceStub(channel)
        answer = await agents.CheckIn(
            agents_pb2.CheckInRequest(version="1.2.3", capabilities=["extract", "load"])
        )
    assert answer.agent_id == created.agent.id
    assert answer.lease_wait_cap_seconds == 30

    listed = await stub.ListAgents(apb.ListAgentsRequest(workspace_id=ws.id))
    (agent,) = listed.agents
    assert agent.online and agent.version == "1.2.3"
    assert list(agent.capabilities) == ["extract", "load"]

    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.CreateAgent(apb.CreateAgentRequest(workspace_id=ws.id, name="edge-1"))
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS

    off = await stub.DeactivateAgent(apb.DeactivateAgentRequest(agent_id=created.agent.id))
    assert not off.active and not off.online


async def test_unknown_workspace_is_not_found(admin) -> None:  # type: ignore[no-untyped-def]
    _, stub = admin
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.CreateApiKey(
            apb.CreateApiKeyRequest(workspace_id="0b4f5e2c-1b7e-4f0e-9a55-3c2d1e0f9a11", name="k")
        )
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_admin_client_calls_each_rpc_and_raises_the_status_class(
    database_url: str,
) -> None:
    async with (
        in_process(database_url) as server,
        AdminClient(f"127.0.0.1:{server.port}", ADMIN_TOKEN) as admin,
    ):
        ws = await admin.create_workspace("acme")
        assert (await admin.get_workspace(ws.id)).name == "acme"
        assert [w.name for w in await admin.list_workspaces()] == ["acme"]
        with pytest.raises(AlreadyExists):
            await admin.create_workspace("acme")

        key = await admin.create_api_key(ws.id, "ci")
        assert key.secret.startswith(key.api_key.prefix)
        assert [k.name for k in await admin.list_api_keys(ws.id)] == ["ci"]
        assert (await admin.revoke_api_key(key.api_key.id)).HasField("revoked_at")

        agent = await admin.create_agent(ws.id, "edge")
        assert agent.token.startswith("setu_ag_")
        assert [a.name for a in await admin.list_agents(ws.id)] == ["edge"]
        assert (await admin.get_agent(agent.agent.id)).active
        assert not (await admin.deactivate_agent(agent.agent.id)).active

        with pytest.raises(NotFound):
            await admin.list_agents("0b4f5e2c-1b7e-4f0e-9a55-3c2d1e0f9a11")
