"""Resumable loads with real processes (docs/flows.md, "Resumable loads"):
the process that loads a multi-part stream is killed (SIGKILL) between two
parts, as the cloud worker (agent → cloud, and a fresh cloud → cloud run,
whose large stream steps aside from its overlapped load: its supervisor
starts it again) and as a setu-agent (cloud → agent); the retry resumes at
the first part without a marker, the destination holds every row once
under `append`, and the target held nothing of the stream until the final
apply.

The window is opened by a pause point, never a sleep: the loader, run with
SETU_TEST_PAUSE (setu_engine/support/testpoints.py), stops once the third
part is committed with its marker, tells the test through a FIFO, and is
killed there."""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_engine.staged.markers import MARKERS
from setu_engine.staged.resumable import stage_table
from setu_engine.support import testpoints
from tests.databases import postgres_config
from tests.e2e.test_cloud_run_lifecycle import fetch
from tests.e2e.test_exactly_once import (
    FAST,
    REAL_ENGINE,
    ROWS,
    each_row_once,
    events,
    source_without_key,
)
from tests.factories import Tenant
from tests.pause import pause_point
from tests.servers import checked_in_agent

S = common_pb2
pytestmark = pytest.mark.slow

STREAM = "public.events"
# Part 2 (from 0) committed: three parts are copied when the loader stops.
HELD = testpoints.STAGED_PART.format(index=2)
AGENT_ENV = REAL_ENGINE | {"SETU_AGENT_RESUMABLE_LOAD_MIN_BYTES": "0"}


async def destination_table(url: str) -> None:
    """The target, with no key: a row loaded twice shows."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE events (id integer, body text)")
    finally:
        await conn.close()


async def pipeline_of(
    client: SetuClient, source: str, destination: str, *, agent: str, loads: bool
) -> str:
    """A pipeline with one end on `agent`: the destination when it `loads`
    (cloud → agent), else the source (agent → cloud, the cloud loads)."""

    def placed(on_agent: bool) -> tuple[str, str]:
        return ("agent", agent) if on_agent else ("cloud", "")

    src = await client.create_connection(
        "source", "postgres", postgres_config(source), *placed(not loads)
    )
    dst = await client.create_connection(
        "destination", "postgres", postgres_config(destination), *placed(loads)
    )
    made = await client.create_pipeline("copy", src.id, dst.id, streams=["events"])
    return str(made.id)


async def before_the_kill(url: str, run_id: str) -> datetime:
    """What the destination holds while the loader waits at the fourth part:
    three parts in the staging table, each with its marker, and nothing of
    the stream in the target. Answers the database's time, to tell the
    parts the retry copied apart from these."""
    stage = stage_table(run_id, STREAM)
    parts = await fetch(
        url,
        f"SELECT part, rows FROM {MARKERS} WHERE run_id = '{run_id}' AND part LIKE 'part-%' "
        "ORDER BY part",
    )
    assert [p for p, _ in parts] == ["part-00000", "part-00001", "part-00002"]
    staged = await fetch(url, f'SELECT count(*) FROM "{stage}"')
    assert staged == [(sum(rows for _, rows in parts),)]
    assert await fetch(url, "SELECT count(*) FROM events") == [(0,)]
    now = await fetch(url, "SELECT clock_timestamp()")
    stamp: datetime = now[0][0]
    return stamp


async def after_the_resume(url: str, run_id: str, killed_at: datetime, timeline: list[str]) -> None:
    """Every row once; the first three parts copied before the kill, every
    other one after it; the staging table gone."""
    await each_row_once(url)
    parts = await fetch(
        url,
        f"SELECT part, loaded_at FROM {MARKERS} WHERE run_id = '{run_id}' "
        "AND part LIKE 'part-%' ORDER BY part",
    )
    first = [p for p, at in parts if at < killed_at]
    assert first == ["part-00000", "part-00001", "part-00002"]
    assert len(parts) > 4
    whole = await fetch(url, f"SELECT rows FROM {MARKERS} WHERE run_id = '{run_id}' AND part = ''")
    assert whole == [(ROWS,)]
    stage = stage_table(run_id, STREAM)
    assert await fetch(url, f"SELECT to_regclass('public.\"{stage}\"')") == [(None,)]
    assert any(f"Resuming at part 4 of {len(parts)}" in m for m in timeline), timeline


async def cloud_pipeline(client: SetuClient, source: str, destination: str) -> str:
    """Both ends in the cloud: the worker extracts and loads."""
    src = await client.create_connection("source", "postgres", postgres_config(source))
    dst = await client.create_connection("destination", "postgres", postgres_config(destination))
    made = await client.create_pipeline("copy", src.id, dst.id, streams=["events"])
    return str(made.id)


@pytest.mark.parametrize("source_on", ["agent", "cloud"])
async def test_a_cloud_worker_killed_between_parts_resumes_at_the_first_part_without_a_marker(
    client_for: Any,
    databases: tuple[str, str],
    tenant: Tenant,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    source_on: str,
) -> None:
    source, destination = databases
    await source_without_key(source)
    await destination_table(destination)
    async with pause_point(tmp_path / "pause", HELD) as pause, AsyncExitStack() as stack:
        # The cloud worker inherits the setting; the agent only extracts.
        monkeypatch.setenv(testpoints.ENV, pause.setting)
        server, client = await client_for(**FAST | {"resumable_load_min_bytes": 0})
        monkeypatch.delenv(testpoints.ENV)
        workers = server.services.workers
        assert workers is not None
        if source_on == "agent":
            log = tmp_path / "agent.log"
            await stack.enter_async_context(
                checked_in_agent(server.port, tenant.agent_token, log, **REAL_ENGINE)
            )
            pipeline = await pipeline_of(
                client, source, destination, agent=str(tenant.agent_id), loads=False
            )
        else:  # a fresh cloud → cloud run: its load would overlap the extract
            pipeline = await cloud_pipeline(client, source, destination)
        await pause.arm()
        job = await client.submit_run(pipeline)
        await pause.reached()
        killed_at = await before_the_kill(destination, job.id)
        victim = await workers.process()
        victim.kill()
        await victim.wait()
        pause.disarm()  # the next worker goes on at this point
        # Dead, and its supervisor starts another: still nothing in the target.
        assert await fetch(destination, "SELECT count(*) FROM events") == [(0,)]
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        timeline = await events(client, job.id)

    assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
    assert workers.started == 2
    await after_the_resume(destination, job.id, killed_at, timeline)
    if source_on == "cloud":
        stepped_aside = [m for m in timeline if "large stream" in m]
        assert stepped_aside == [
            f"{STREAM}: large stream (≥ 0 bytes staged): loads part by part after the "
            "extract, so a crash resumes"
        ], timeline


async def test_an_agent_killed_between_parts_resumes_at_the_first_part_without_a_marker(
    client_for: Any, databases: tuple[str, str], tenant: Tenant, tmp_path: Path
) -> None:
    source, destination = databases
    await source_without_key(source)
    await destination_table(destination)
    server, client = await client_for(**FAST)
    pipeline = await pipeline_of(
        client, source, destination, agent=str(tenant.agent_id), loads=True
    )
    async with pause_point(tmp_path / "pause", HELD) as pause:
        env = AGENT_ENV | {testpoints.ENV: pause.setting}
        await pause.arm()
        async with checked_in_agent(
            server.port, tenant.agent_token, tmp_path / "agent-a.log", **env
        ) as first:
            job = await client.submit_run(pipeline)
            await pause.reached()
            killed_at = await before_the_kill(destination, job.id)
            first.kill()
            await first.wait()
        pause.disarm()  # the next agent goes on at this point
        assert await fetch(destination, "SELECT count(*) FROM events") == [(0,)]
        async with checked_in_agent(
            server.port, tenant.agent_token, tmp_path / "agent-b.log", **env
        ):
            await client.wait_for_job(job.id)
            done = await client.get_job(job.id)
            timeline = await events(client, job.id)

    assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
    assert any("stopped heartbeating; requeued" in m for m in timeline), timeline
    await after_the_resume(destination, job.id, killed_at, timeline)
