"""SetuClient against real servers: retries, budgets, closing, and the
public values it hands back, on the test server that ships with setu-server."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import traceback
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import grpc
import pytest

from setu_client import (
    AlreadyExists,
    ClientClosed,
    FakeClock,
    JobNotFound,
    JobNotStarted,
    JobOutcome,
    JobState,
    NotFound,
    Phase,
    RetryPolicy,
    SetuClient,
    Unavailable,
)
from setu_server import models
from setu_server.store import jobs
from setu_server.testing import local_server
from tests.factories import make_job, make_tenant
from tests.servers import free_port, in_process, server_process, wait_healthy


async def test_wait_for_job_rides_out_a_server_restart(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    port = free_port()
    env = {"SETU_DATABASE_URL": database_url}
    async with SetuClient(
        f"127.0.0.1:{port}", tenant.api_key, retry=RetryPolicy(max_seconds=0.5)
    ) as client:
        with server_process(env, tmp_path / "first.log", port=port) as (first, _):
            await wait_healthy(port)
            waiting = asyncio.create_task(client.wait_for_job(str(job.id)))
            first.send_signal(signal.SIGKILL)
            await asyncio.to_thread(first.wait)
        with server_process(env, tmp_path / "second.log", port=port):
            await wait_healthy(port)
            await jobs.transition_job(pool, job.id, models.JobState.RUNNING, now=None, message="r")
            await jobs.transition_job(
                pool, job.id, models.JobState.SUCCEEDED, now=None, message="d"
            )
            answer = await asyncio.wait_for(waiting, 60)
    assert answer == JobOutcome(str(job.id), JobState.SUCCEEDED, "", answer.version)


@pytest.mark.looptime(noop_cycles=5000)
async def test_an_unreachable_server_exhausts_the_retry_budget() -> None:
    loop = asyncio.get_running_loop()
    port = free_port()  # nothing listens here
    policy = RetryPolicy(initial_seconds=0.5, max_seconds=5, long_poll_budget_seconds=120)
    async with SetuClient(f"127.0.0.1:{port}", "setu_ak_x", retry=policy) as client:
        started = loop.time()
        with pytest.raises(Unavailable):
            await client.wait_for_job(str(uuid.uuid4()))
        assert loop.time() - started > 119.99


@pytest.mark.looptime(noop_cycles=5000)
async def test_by_default_a_short_call_gives_up_in_seconds_and_a_long_poll_keeps_trying() -> None:
    loop = asyncio.get_running_loop()
    port = free_port()  # nothing listens here
    async with SetuClient(f"127.0.0.1:{port}", "setu_ak_x") as client:
        policy = client.retry
        started = loop.time()
        with pytest.raises(Unavailable):
            await client.get_job(str(uuid.uuid4()))
        took = loop.time() - started
        # Past the 15 s budget by at most one last backoff.
        assert policy.budget_seconds == 15.0
        assert policy.budget_seconds <= took <= policy.budget_seconds + policy.max_seconds
        # A long-poll rides out the same outage far longer than a short call.
        with pytest.raises(TimeoutError):
            await client.wait_for_job(str(uuid.uuid4()), timeout=120)


async def test_closing_the_client_ends_parked_waits_cleanly(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    parked = asyncio.Event()

    async def mark(job_id: uuid.UUID) -> None:
        parked.set()

    async with in_process(database_url) as server:
        server.jobs.hooks.after_read = mark
        client = SetuClient(f"127.0.0.1:{server.port}", tenant.api_key)
        waiting = asyncio.create_task(client.wait_for_job(str(job.id)))
        await parked.wait()
        await client.close()
        with pytest.raises(ClientClosed):
            await asyncio.wait_for(waiting, 10)
        with pytest.raises(ClientClosed):
            await client.get_job(str(job.id))


START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def test_a_run_on_the_shipped_test_server_reads_back_as_public_values(
    database_url: str, tmp_path: Path
) -> None:
    clock = FakeClock(START)
    async with (
        local_server(database_url, clock, local_files_root=str(tmp_path)) as server,
        SetuClient(server.address, server.api_key) as client,
    ):
        # Cloud connections use files only in their workspace's folder.
        folder = tmp_path / server.workspace_id
        folder.mkdir()
        with sqlite3.connect(folder / "source.db") as db:
            db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY)")
            db.executemany("INSERT INTO items VALUES (?)", [(i,) for i in range(7)])
        made = await client.create_connection("src", "sqlite", {"path": str(folder / "source.db")})
        into = await client.create_connection(
            "dst", "sqlite", {"path": str(folder / "dst.db"), "create": True}
        )
        pipeline = await client.create_pipeline("copy", made.id, into.id, streams=["items"])
        ready = await client.submit_run(pipeline.id, start=False)
        with pytest.raises(JobNotStarted) as not_started:
            await client.wait_for_job(ready.id)
        await client.start_job(ready.id)
        outcome = await client.wait_for_job(ready.id)
        job = await client.get_job(ready.id)

        # A pipeline's name does as well as its id.
        named = await client.submit_run("copy", start=False)
        assert named.pipeline_id == pipeline.id and named.state is JobState.READY
        await client.cancel_job(named.id)
        with pytest.raises(NotFound, match="no pipeline named 'nope'"):
            await client.submit_run("nope")

        other = await server.new_workspace()
        async with SetuClient(server.address, other.api_key) as stranger:
            with pytest.raises(JobNotFound) as not_found:
                await stranger.get_job(ready.id)

    assert outcome.state is JobState.SUCCEEDED, outcome.error_message
    assert (outcome.state, str(outcome.state), outcome.terminal) == (
        JobState.SUCCEEDED,
        "JobState.SUCCEEDED",
        True,
    )
    assert job.state is JobState.SUCCEEDED and job.phase in (Phase.DIRECT, Phase.LOAD)
    assert (job.progress.rows_extracted, job.progress.rows_loaded) == (7, 7)
    assert (job.extract_runtime, job.load_runtime) == ("cloud", "cloud")
    assert job.created_at == START  # the server's clock is the one the test holds
    assert job.version == outcome.version
    assert not_started.value.job_id == ready.id and not_found.value.job_id == ready.id
    assert not_found.value.status is grpc.StatusCode.NOT_FOUND


async def test_a_refused_call_raises_its_error_alone_with_the_grpc_status_kept(
    client: SetuClient, tmp_path: Path
) -> None:
    config = {"path": str(tmp_path / "a.db"), "create": True}
    await client.create_connection("twice", "sqlite", config)
    with pytest.raises(AlreadyExists) as refused:
        await client.create_connection("twice", "sqlite", config)
    error = refused.value
    shown = "".join(traceback.format_exception(error))
    # No grpc error chained under it: the message is the server's, once.
    assert error.__cause__ is None and error.__suppress_context__
    assert "AioRpcError" not in shown and "direct cause" not in shown
    assert shown.count("already exists") == 1, shown
    # What grpc said stays at hand.
    assert error.rpc_error is not None
    assert error.rpc_error.code() is grpc.StatusCode.ALREADY_EXISTS
    assert error.rpc_error.details() == error.message
