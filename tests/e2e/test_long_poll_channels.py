"""A client's long-polls pass over a channel still failing to connect while
another is connected (setu_client/_client.py `_pick_long`).

After a restart each long-poll channel reconnects on its own backoff: the
first to connect tells the outage listener the server is back, and a call
sent next to one still waiting would fail at once and say it went away
again (the CLI printed "went away" and "is back" twice). The channel left
behind is held in TRANSIENT_FAILURE here by pointing it at a port nobody
listens on, so the test does not depend on when grpc retries.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest

from setu_client import JobState, SetuClient
from setu_client._proto.setu.v1 import jobs_pb2_grpc
from setu_client.channel import open_channel
from setu_client.errors import SetuError
from setu_server.models import JobState as ServerJobState
from setu_server.server import Running
from tests.factories import Tenant, make_job
from tests.servers import free_port


class Heard:
    """An outage listener that writes down what it hears."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def went_away(self, error: SetuError) -> None:
        self.said.append("went away")

    def back(self) -> None:
        self.said.append("back")


async def held_failing(client: SetuClient, index: int, api_key: str) -> None:
    """Long-poll channel `index` of `client` in TRANSIENT_FAILURE: it dials
    a port that refuses, as a channel in its reconnect backoff does."""
    channel = open_channel(f"127.0.0.1:{free_port()}", api_key)
    await client._long[index].close(grace=None)
    client._long[index] = channel
    client._long_stubs[index] = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
    state = channel.get_state(try_to_connect=True)
    while state is not grpc.ChannelConnectivity.TRANSIENT_FAILURE:
        await channel.wait_for_state_change(state)
        state = channel.get_state()


async def outcome_by(client: SetuClient, how: str, job_id: str) -> JobState:
    if how == "wait":
        return (await client.wait_for_job(job_id)).state
    states = [job.state async for job in client.watch_job(job_id)]
    return states[-1]


@pytest.fixture
async def heard_client(server: Running, tenant: Tenant) -> AsyncIterator[tuple[SetuClient, Heard]]:
    heard = Heard()
    async with SetuClient(
        f"127.0.0.1:{server.port}", tenant.api_key, long_poll_channels=2, outage=heard
    ) as client:
        yield client, heard


@pytest.mark.parametrize("how", ["wait", "watch"])
async def test_a_long_poll_passes_over_a_channel_still_reconnecting(
    heard_client: tuple[SetuClient, Heard], tenant: Tenant, pool: asyncpg.Pool, how: str
) -> None:
    client, heard = heard_client
    job = await make_job(pool, tenant.workspace_id, state=ServerJobState.SUCCEEDED)
    await held_failing(client, 1, tenant.api_key)

    # The channels take turns: the first call goes to channel 0 (connected
    # by it), the second would go to channel 1.
    for _ in range(2):
        assert await outcome_by(client, how, str(job.id)) == JobState.SUCCEEDED

    assert heard.said == [], "the server never went away"
