"""Reachability pre-flight: a run whose first edge stage sits on an offline
agent is refused at once, naming the agent and how to bring it back."""

from __future__ import annotations

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_client.errors import AgentOffline
from tests.factories import Tenant, make_tenant
from tests.servers import in_process

S = common_pb2


async def test_a_run_whose_first_edge_stage_is_offline_is_refused_at_once(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant: Tenant = await make_tenant(pool)  # its agent never checked in
    async with (
        in_process(database_url) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        src = await client.create_connection(
            "edge", "sqlite", {"path": "/data/crm.db"}, "agent", str(tenant.agent_id)
        )
        dst = await client.create_connection("cloud", "sqlite", {"path": "/tmp/out.db"})
        pipeline = await client.create_pipeline("p", src.id, dst.id)

        expected = rf"agent test agent \({tenant.agent_id}\) is offline \(never seen\): start it"
        with pytest.raises(AgentOffline, match=expected):
            await client.submit_run(pipeline.id)
        assert [job async for job in client.list_jobs()] == []

        # A run kept READY is checked again when it is started.
        ready = await client.submit_run(pipeline.id, start=False)
        assert ready.state == S.JOB_STATE_READY
        with pytest.raises(AgentOffline, match="setu-agent --server"):
            await client.start_job(ready.id)
        assert (await client.get_job(ready.id)).state == S.JOB_STATE_READY


async def test_a_cloud_to_agent_run_whose_load_agent_is_offline_is_refused_at_once(
    database_url: str, pool: asyncpg.Pool
) -> None:
    # The cloud would stage, then wait at phase load for an agent that is
    # not there: the first edge stage is the load, and it is checked.
    tenant: Tenant = await make_tenant(pool)  # its agent never checked in
    async with (
        in_process(database_url) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        src = await client.create_connection("cloud", "sqlite", {"path": "/tmp/in.db"})
        dst = await client.create_connection(
            "edge", "sqlite", {"path": "/data/out.db"}, "agent", str(tenant.agent_id)
        )
        pipeline = await client.create_pipeline("p", src.id, dst.id)

        expected = rf"agent test agent \({tenant.agent_id}\) is offline \(never seen\): start it"
        with pytest.raises(AgentOffline, match=expected):
            await client.submit_run(pipeline.id)
        assert [job async for job in client.list_jobs()] == []
        tasks = await pool.fetchval("SELECT count(*) FROM task")
        assert tasks == 0, "nothing was dispatched to the cloud either"
