"""The SDK's watch_job across a server that stops mid-watch: it resumes from
the last version it saw, on another replica or on a server restarted at the
same address, and ends only after the terminal snapshot."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import asyncpg
import grpc

from setu_client import JobState as ClientJobState
from setu_client import SetuClient
from setu_client._proto.setu.v1 import jobs_pb2, jobs_pb2_grpc
from setu_client.channel import open_channel
from setu_server.models import JobState
from setu_server.server import Running
from setu_server.store import jobs
from tests.factories import Tenant, make_job, make_tenant
from tests.servers import in_process

# No cloud workers: nothing here runs a task.
QUIET = {"worker_processes": 0}


def watching(server: Running) -> asyncio.Event:
    """Set once a WatchJob on `server` has read the job and is about to stream."""
    parked = asyncio.Event()

    async def mark(job_id: uuid.UUID) -> None:
        parked.set()

    server.jobs.hooks.watching = mark
    return parked


class Stoppable:
    """A server the test stops when it chooses (or at the end of the test)."""

    def __init__(self) -> None:
        self._stack = contextlib.AsyncExitStack()

    async def start(self, database_url: str, **settings: object) -> Running:
        return await self._stack.enter_async_context(in_process(database_url, **(QUIET | settings)))

    async def stop(self) -> None:
        await self._stack.aclose()


@contextlib.asynccontextmanager
async def stoppable(count: int) -> AsyncIterator[list[Stoppable]]:
    servers = [Stoppable() for _ in range(count)]
    try:
        yield servers
    finally:
        for server in servers:
            await server.stop()


async def test_a_watch_resumes_on_another_replica_from_the_last_version_seen(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    async with stoppable(2) as (a_handle, b_handle):
        a, b = await a_handle.start(database_url), await b_handle.start(database_url)
        parked = {a.port: watching(a), b.port: watching(b)}
        # Both replicas behind one target: the channel moves to whichever answers.
        target = f"ipv4:127.0.0.1:{a.port},127.0.0.1:{b.port}"
        async with SetuClient(target, tenant.api_key) as client:
            snapshots = aiter(client.watch_job(str(job.id)))
            first = await anext(snapshots)
            assert first.state == ClientJobState.RUNNING
            served = a if parked[a.port].is_set() else b
            other = b if served is a else a
            assert not parked[other.port].is_set()

            # The server closes: its stream ends without the job's end.
            await (a_handle if served is a else b_handle).stop()
            following = asyncio.create_task(anext(snapshots))
            resumed = asyncio.create_task(parked[other.port].wait())
            await asyncio.wait({following, resumed}, return_when=asyncio.FIRST_COMPLETED)
            assert resumed.done(), "the watch went on at the other replica"
            # Parked there from the version it saw: a watch from the start
            # would have answered that version again at once.
            assert not following.done()
            await other.lifecycle.transition(job.id, JobState.SUCCEEDED, "done")
            last = await asyncio.wait_for(following, 30)
            assert (last.state, last.version) == (ClientJobState.SUCCEEDED, first.version + 1)
            assert [j async for j in snapshots] == [], "the generator ends after the terminal one"


async def test_a_watch_resumes_on_a_server_restarted_at_the_same_address(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    async with stoppable(1) as (handle,):
        port = (await handle.start(database_url)).port
        async with SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client:
            snapshots = aiter(client.watch_job(str(job.id)))
            first = await anext(snapshots)
            await handle.stop()
            following = asyncio.create_task(anext(snapshots))
            # The job ends while no server runs; a new one comes up on the port.
            await jobs.transition_job(pool, job.id, JobState.SUCCEEDED, now=None, message="done")
            async with in_process(database_url, listen=f"127.0.0.1:{port}", **QUIET):
                last = await asyncio.wait_for(following, 30)
                assert (last.state, last.version) == (
                    ClientJobState.SUCCEEDED,
                    first.version + 1,
                )
                assert [j async for j in snapshots] == []


async def test_a_watch_ends_cleanly_a_second_before_its_deadline(
    server: Running, tenant: Tenant, pool: asyncpg.Pool
) -> None:
    # The job never changes: the stream ends OK with the one snapshot, not
    # with DEADLINE_EXCEEDED, so the SDK resumes it as a long-poll's answer.
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    async with open_channel(f"127.0.0.1:{server.port}", tenant.api_key) as channel:
        stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
        stream = stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=str(job.id)), timeout=2.5)
        answers = [answer.job.id async for answer in stream]
        assert await stream.code() == grpc.StatusCode.OK
    assert answers == [str(job.id)]
