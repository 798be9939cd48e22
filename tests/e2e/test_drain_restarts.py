"""A drain is not a failure (docs/jobs-and-tasks.md), with real processes:
the runtime extracting a run is stopped with SIGTERM three times, mid-read
(a pause point holds each attempt after its third part is read, never a
sleep): the
cloud worker of a cloud → cloud run (its supervisor starts another), and
the setu-agent of an agent → cloud run (the test starts another). Each
stop hands the task back (ReleaseTask) where it stood; the run ends
SUCCEEDED with every row once and its task still on attempt 1."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client._proto.setu.v1 import common_pb2
from setu_engine.support import testpoints
from setu_server.server import Running
from tests.e2e.test_exactly_once import (
    FAST,
    REAL_ENGINE,
    each_row_once,
    events,
    source_without_key,
)
from tests.e2e.test_kill_mid_load import cloud_pipeline, destination_table, pipeline_of
from tests.factories import Tenant
from tests.pause import PausePoint
from tests.servers import checked_in_agent

pytestmark = pytest.mark.slow

RESTARTS = 3
# The third part each attempt reads (wherever it resumed: a PostgreSQL
# table's read resumes after the parts stored): the read is open, mid-stream.
HELD = testpoints.READ_PART.format(count=3)
# The runtime's grace on SIGTERM: the held task outlasts it and is handed back.
GRACE = {"grace_seconds": 0.5}


def hand_backs(server: Running) -> asyncio.Queue[tuple[bool, bool]]:
    """Every ReleaseTask the server records, as (free, will run again)."""
    heard: asyncio.Queue[tuple[bool, bool]] = asyncio.Queue()
    release = server.tasks.release

    async def recorded(*args: Any, **kwargs: Any) -> tuple[bool, bool]:
        answer = await release(*args, **kwargs)
        heard.put_nowait(answer)
        return answer

    server.tasks.release = recorded  # type: ignore[method-assign]
    return heard


async def restarted_mid_extract(
    folder: Path,
    heard: asyncio.Queue[tuple[bool, bool]],
    submit: Callable[[], Awaitable[str]],
    stop_the_runtime: Callable[[], Awaitable[None]],
    next_runtime: Callable[[], Awaitable[None]] | None = None,
    point: str = HELD,
) -> str:
    """Submits the run, then RESTARTS times: waits for the runtime to hold
    the extract at `point`, stops it with SIGTERM, waits for its hand-back,
    arms the point for the next runtime, and lets the stopped one go (its
    held read) so it exits; then `next_runtime` starts the next one (a cloud
    worker's supervisor does that itself). Answers the run's id."""
    pauses = [PausePoint(folder, point)]
    await pauses[0].arm()
    try:
        job_id = await submit()
        for restart in range(RESTARTS):
            held = pauses[-1]
            await held.reached()
            await stop_the_runtime()
            free, again = await asyncio.wait_for(heard.get(), 60)
            assert (free, again) == (True, True), f"hand-back {restart + 1}"
            held.disarm()
            if restart < RESTARTS - 1:
                pauses.append(PausePoint(folder, point))
                await pauses[-1].arm()
            held.resume()
            if next_runtime is not None:
                await next_runtime()
    finally:
        for pause in pauses:
            pause.close()
    return job_id


async def settled(client: Any, pool: asyncpg.Pool, destination: str, job_id: str) -> None:
    await client.wait_for_job(job_id)
    done = await client.get_job(job_id)
    timeline = await events(client, job_id)
    said = "\n".join(timeline)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, (done.error_message, said)
    await each_row_once(destination)
    attempts = await pool.fetch("SELECT kind, attempt FROM task WHERE job_id = $1", job_id)
    assert attempts and all(row["attempt"] == 1 for row in attempts), (attempts, said)
    handed = [m for m in timeline if "handed back at extract of public.events" in m]
    assert len(handed) == RESTARTS, said
    assert all("no attempt spent (attempt 1 of 3)" in m for m in handed), said
    print("hand-backs:", *handed, sep="\n  ")


async def test_a_cloud_run_survives_sigterm_restarts_of_its_worker_mid_extract(
    client_for: Any,
    databases: tuple[str, str],
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    source, destination = databases
    await source_without_key(source)
    await destination_table(destination)
    folder = tmp_path / "pause"
    # The cloud workers inherit the setting from their server.
    monkeypatch.setenv(testpoints.ENV, testpoints.setting(HELD, folder))
    server, client = await client_for(**FAST | GRACE)
    monkeypatch.delenv(testpoints.ENV)
    workers = server.services.workers
    assert workers is not None
    heard = hand_backs(server)
    pipeline = await cloud_pipeline(client, source, destination)

    async def submit() -> str:
        return str((await client.submit_run(pipeline)).id)

    async def stop_the_worker() -> None:
        (await workers.process()).terminate()

    job_id = await restarted_mid_extract(folder, heard, submit, stop_the_worker)
    await settled(client, pool, destination, job_id)
    assert workers.started == RESTARTS + 1


async def test_an_agent_to_cloud_run_survives_sigterm_restarts_of_its_agent_mid_extract(
    client_for: Any,
    databases: tuple[str, str],
    pool: asyncpg.Pool,
    tenant: Tenant,
    tmp_path: Path,
) -> None:
    source, destination = databases
    await source_without_key(source)
    await destination_table(destination)
    folder = tmp_path / "pause"
    server, client = await client_for(**FAST | GRACE)
    heard = hand_backs(server)
    pipeline = await pipeline_of(
        client, source, destination, agent=str(tenant.agent_id), loads=False
    )
    env = REAL_ENGINE | {
        testpoints.ENV: testpoints.setting(HELD, folder),
        "SETU_GRACE_SECONDS": str(GRACE["grace_seconds"]),
    }
    async with AsyncExitStack() as stack:
        agents: list[asyncio.subprocess.Process] = []

        async def start_agent() -> None:
            log = tmp_path / f"agent-{len(agents)}.log"
            started = checked_in_agent(server.port, tenant.agent_token, log, **env)
            agents.append(await stack.enter_async_context(started))

        async def submit() -> str:
            await start_agent()
            return str((await client.submit_run(pipeline)).id)

        async def stop_the_agent() -> None:
            agents[-1].terminate()

        async def next_agent() -> None:
            # The agent's queue is its own: the task waits for the next one.
            assert await asyncio.wait_for(agents[-1].wait(), 60) == 0
            await start_agent()

        job_id = await restarted_mid_extract(folder, heard, submit, stop_the_agent, next_agent)
        await settled(client, pool, destination, job_id)
    assert len(agents) == RESTARTS + 1
