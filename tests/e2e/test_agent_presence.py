"""Agent presence tells the truth sooner: a graceful stop is offline at once;
a silent death is offline once the presence window (derived from the lease
long-poll cap) has passed; a parked LeaseTask keeps an agent online however
long it has been since its last write. Time is a FakeClock moved by hand;
nothing sleeps."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import asyncpg
import grpc
import pytest

from setu_client import Agent, AgentOffline, SetuClient
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc
from setu_client.channel import open_channel
from setu_client.clock import FakeClock
from setu_client.messages import Pipeline
from setu_server.server import Running
from setu_server.service.agents import AgentPresence
from tests.factories import Tenant, make_task, make_tenant
from tests.servers import checked_in_agent, in_process

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# presence_window(30 s cap, 60 s TTL): the longer of the cap and TTL/3, plus 15 s.
WINDOW = timedelta(seconds=45)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


async def _edge_pipeline(client: SetuClient, tenant: Tenant) -> Pipeline:
    """A pipeline whose source sits on the tenant's agent: a run needs it online."""
    src = await client.create_connection(
        "edge", "sqlite", {"path": "/data/crm.db"}, "agent", str(tenant.agent_id)
    )
    dst = await client.create_connection("cloud", "sqlite", {"path": "/tmp/out.db"})
    return await client.create_pipeline("p", src.id, dst.id)


async def _agent(client: SetuClient, name: str = "test agent") -> Agent:
    found = {a.name: a async for a in client.list_agents()}
    return found[name]


def _when(presence: AgentPresence, point: str, condition: Callable[[UUID], bool]) -> asyncio.Event:
    """Set once `condition` holds after a LeaseTask `parked` or `left` (a presence hook)."""
    happened = asyncio.Event()

    async def check(agent_id: UUID) -> None:
        if condition(agent_id):
            happened.set()

    setattr(presence.hooks, point, check)
    return happened


@pytest.fixture
async def agent_stub(
    server: Running, tenant: Tenant
) -> AsyncIterator[agents_pb2_grpc.AgentServiceStub]:
    async with open_channel(f"127.0.0.1:{server.port}", tenant.agent_token) as channel:
        yield agents_pb2_grpc.AgentServiceStub(channel)


def test_the_window_is_derived_from_the_lease_settings(server: Running) -> None:
    assert server.services.presence.window == WINDOW


async def test_a_graceful_stop_is_offline_at_once_and_a_run_is_refused_naming_the_agent(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path
) -> None:
    pipeline = await _edge_pipeline(client, tenant)
    async with checked_in_agent(server.port, tenant.agent_token, tmp_path / "a.log") as agent:
        assert (await _agent(client)).online
        agent.send_signal(signal.SIGTERM)
        assert await agent.wait() == 0
    # The clock has not moved: only the sign-off can have made it offline.
    stopped = await _agent(client)
    assert not stopped.online and stopped.status == "stopped"
    assert stopped.signed_off_at == START
    expected = (
        rf"agent test agent \({tenant.agent_id}\) is offline \(stopped at 2026-03-01 12:00:00 "
        r"UTC\): start it with `setu-agent --server <address> --token <agent token>`"
    )
    with pytest.raises(AgentOffline, match=expected):
        await client.submit_run(pipeline.id)
    assert [job async for job in client.list_jobs()] == []

    # Started again, it checks in and is back.
    async with checked_in_agent(server.port, tenant.agent_token, tmp_path / "b.log"):
        back = await _agent(client)
        assert back.online and back.signed_off_at is None
        await client.submit_run(pipeline.id)


async def test_an_agent_killed_with_sigkill_is_offline_once_the_window_passes(
    server: Running, client: SetuClient, tenant: Tenant, clock: FakeClock, tmp_path: Path
) -> None:
    pipeline = await _edge_pipeline(client, tenant)
    presence = server.services.presence
    parked = _when(presence, "parked", lambda _: True)
    gone = _when(presence, "left", lambda agent_id: presence.parked_calls(agent_id) == 0)
    async with checked_in_agent(server.port, tenant.agent_token, tmp_path / "a.log") as agent:
        await asyncio.wait_for(parked.wait(), 30)
        agent.kill()
        await agent.wait()
    # The server hears the connection drop: no parked call holds it online.
    await asyncio.wait_for(gone.wait(), 30)
    assert presence.parked_calls(tenant.agent_id) == 0
    clock.advance(WINDOW.total_seconds() - 1)
    assert (await _agent(client)).online, "within the window it may still be alive"

    clock.advance(2)
    dead = await _agent(client)
    assert not dead.online and dead.status == "offline" and dead.signed_off_at is None
    with pytest.raises(AgentOffline, match=r"is offline \(last seen 2026-03-01 12:00:00 UTC\)"):
        await client.submit_run(pipeline.id)


async def _parked_lease(
    server: Running, stub: agents_pb2_grpc.AgentServiceStub
) -> asyncio.Future[pb.LeaseTaskResponse]:
    parked = asyncio.Event()

    async def mark(runtime: str) -> None:
        parked.set()

    server.tasks.hooks.parked = mark
    lease = asyncio.ensure_future(stub.LeaseTask(pb.LeaseTaskRequest(wait_seconds=30), timeout=45))
    await parked.wait()
    return lease


async def test_a_parked_lease_keeps_an_agent_online_past_the_old_90_s_window(
    server: Running,
    client: SetuClient,
    tenant: Tenant,
    clock: FakeClock,
    agent_stub: agents_pb2_grpc.AgentServiceStub,
) -> None:
    pipeline = await _edge_pipeline(client, tenant)
    await agent_stub.CheckIn(pb.CheckInRequest(version="1"))
    lease = await _parked_lease(server, agent_stub)
    clock.advance(120)  # no write since: only the parked call says it is there

    assert (await _agent(client)).online
    job = await client.submit_run(pipeline.id)
    answer = await asyncio.wait_for(lease, 20)
    assert answer.task.job_id == job.id, "the parked call took the run's extract at once"

    # Its call answered, the agent is judged by last_seen_at alone: too old.
    with pytest.raises(AgentOffline, match="is offline"):
        await client.submit_run(pipeline.id)


async def test_a_lease_parked_on_one_replica_keeps_the_agent_online_on_another(
    database_url: str, pool: asyncpg.Pool, clock: FakeClock
) -> None:
    tenant = await make_tenant(pool)
    # A credential cached on A: its LeaseTask writes nothing through authentication.
    async with (
        in_process(database_url, clock, auth_cache_seconds=3600) as a,
        in_process(database_url, clock) as b,
        open_channel(f"127.0.0.1:{a.port}", tenant.agent_token) as channel,
        SetuClient(f"127.0.0.1:{b.port}", tenant.api_key) as on_b,
    ):
        stub = agents_pb2_grpc.AgentServiceStub(channel)
        await stub.CheckIn(pb.CheckInRequest(version="1"))
        clock.advance(40)
        lease = await _parked_lease(a, stub)
        clock.advance(40)  # 80 s after check-in, 40 s after the call parked on A
        assert b.services.presence.parked_calls(tenant.agent_id) == 0
        seen = await _agent(on_b)
        assert seen.online and seen.last_seen_at == START + timedelta(seconds=40)
        lease.cancel()


async def test_agents_list_shows_the_callers_workspace_alone_with_what_each_runs(
    server: Running,
    client: SetuClient,
    tenant: Tenant,
    other: Tenant,
    pool: asyncpg.Pool,
    agent_stub: agents_pb2_grpc.AgentServiceStub,
) -> None:
    await agent_stub.CheckIn(pb.CheckInRequest(version="1.2.3", hostname="edge-host"))
    held = await make_task(pool, tenant, now=START)
    leased = await agent_stub.LeaseTask(pb.LeaseTaskRequest(wait_seconds=0))
    assert leased.task.id == str(held.id)
    await make_task(pool, tenant, now=START)  # waits: the agent holds one already

    agents = [a async for a in client.list_agents()]
    assert [a.id for a in agents] == [str(tenant.agent_id)], "the other workspace's is absent"
    (me,) = agents
    assert me.online and me.version == "1.2.3" and me.hostname == "edge-host"
    assert [(t.task_id, t.job_id, t.kind, t.attempt) for t in me.running] == [
        (str(held.id), str(held.job_id), "test", 1)
    ]
    assert me.queued_tasks == 1

    # Asking for another workspace's agent by id finds nothing.
    async with open_channel(f"127.0.0.1:{server.port}", tenant.api_key) as channel:
        directory = agents_pb2_grpc.AgentDirectoryServiceStub(channel)
        foreign = await directory.ListWorkspaceAgents(
            pb.ListWorkspaceAgentsRequest(agent_id=str(other.agent_id))
        )
        assert list(foreign.agents) == []
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await directory.ListWorkspaceAgents(pb.ListWorkspaceAgentsRequest(agent_id="x"))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "agent_id: must be a UUID" in (info.value.details() or "")
    # An agent token cannot list.
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _list_with(server, tenant.agent_token)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def _list_with(server: Running, token: str) -> pb.ListWorkspaceAgentsResponse:
    async with open_channel(f"127.0.0.1:{server.port}", token) as channel:
        directory = agents_pb2_grpc.AgentDirectoryServiceStub(channel)
        answer: pb.ListWorkspaceAgentsResponse = await directory.ListWorkspaceAgents(
            pb.ListWorkspaceAgentsRequest()
        )
        return answer


async def test_agents_list_pages_by_name(
    server: Running, client: SetuClient, tenant: Tenant
) -> None:
    for name in ("c-agent", "a-agent", "b-agent"):
        await server.services.admin.create_agent(tenant.workspace_id, name)
    listed = [a async for a in client.list_agents(page_size=2)]
    assert [a.name for a in listed] == ["a-agent", "b-agent", "c-agent", "test agent"]
    assert {a.status for a in listed} == {"offline"}, "none has ever checked in"


async def _setu(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setu_cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_setu_agents_list_prints_presence_and_work_as_json_and_as_a_table(
    server: Running,
    tenant: Tenant,
    other: Tenant,
    pool: asyncpg.Pool,
    agent_stub: agents_pb2_grpc.AgentServiceStub,
) -> None:
    await agent_stub.CheckIn(pb.CheckInRequest(version="1.2.3", hostname="edge-host"))
    held = await make_task(pool, tenant, now=START)
    await agent_stub.LeaseTask(pb.LeaseTaskRequest(wait_seconds=0))
    env = os.environ | {"SETU_SERVER": f"127.0.0.1:{server.port}", "SETU_API_KEY": tenant.api_key}

    code, out, err = await _setu("agents", "list", "--json", env=env)
    assert code == 0, err
    (agent,) = json.loads(out)["agents"]
    assert agent["id"] == str(tenant.agent_id) and agent["name"] == "test agent"
    assert agent["online"] is True and agent["last_seen_at"] == "2026-03-01T12:00:00Z"
    assert agent["running"] == [
        {
            "task_id": str(held.id),
            "job_id": str(held.job_id),
            "kind": "test",
            "attempt": 1,
            "pipeline_id": "",
            "lease_expires_at": "2026-03-01T12:01:00Z",
        }
    ]

    code, out, err = await _setu("--json", "agents", "list", env=env | {"SETU_API_KEY": ""})
    assert code == 2 and err.startswith("error: an API key is required")

    await agent_stub.SignOff(pb.SignOffRequest(reason="test"))
    code, out, err = await _setu("agents", "list", env=env)
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == [
        "NAME",
        "STATUS",
        "SEEN",
        "RUNNING",
        "QUEUED",
        "HOST",
        "VERSION",
        "ID",
    ]
    assert row.startswith("test agent  stopped  2026-03-01T12:00:00Z  test job ")
    assert row.endswith(f"0       edge-host  1.2.3    {tenant.agent_id}")
