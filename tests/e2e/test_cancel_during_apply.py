"""A cancel that meets a resumable load's final apply (docs/flows.md,
"Resumable loads"): the cloud worker, loading what an agent extracted
(agent → cloud), is held at a pause point (setu_engine/support/testpoints.py)
while the test requests the cancel, never by a sleep.

- Held inside the apply's open transaction: the cancel is heard before the
  COMMIT, the apply rolls back, the job ends CANCELLED with the cancel's
  reason, the destination and the saved cursor are as they were, and the
  staging table is gone.
- Held just after the COMMIT: the load happened. The job ends SUCCEEDED
  with no error message, the cursor advanced, the outputs recorded."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_engine.staged.resumable import stage_table
from setu_engine.support import testpoints
from tests.databases import postgres_config
from tests.e2e.test_cloud_run_lifecycle import fetch
from tests.e2e.test_exactly_once import FAST, REAL_ENGINE, ROWS, events, source_without_key
from tests.factories import Tenant
from tests.pause import pause_point
from tests.servers import checked_in_agent

S = common_pb2
pytestmark = pytest.mark.slow

STREAM = "public.events"
MORE = 1_000  # the second run's delta: ten parts of 100 rows
INCREMENTAL = {"sync": {"events": {"mode": "incremental", "cursor": "id"}}}


async def cursor_of(client: SetuClient, pipeline_id: str) -> str:
    state = await client.get_pipeline_state(pipeline_id)
    return str(state.streams[0].cursor.value)


async def add_rows(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "INSERT INTO events SELECT i, md5(i::text) FROM generate_series($1::int, $2::int) i",
            ROWS + 1,
            ROWS + MORE,
        )
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("point", "committed"), [(testpoints.APPLY_OPEN, False), (testpoints.APPLIED, True)]
)
async def test_a_cancel_during_the_final_apply_ends_the_job_one_way_or_the_other(
    client_for: Any,
    databases: tuple[str, str],
    tenant: Tenant,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    point: str,
    committed: bool,
) -> None:
    source, destination = databases
    await source_without_key(source)
    async with (
        pause_point(tmp_path / "pause", point) as pause,
        AsyncExitStack() as stack,
    ):
        # The worker inherits the setting; it pauses only once armed.
        monkeypatch.setenv(testpoints.ENV, pause.setting)
        server, client = await client_for(**FAST | {"resumable_load_min_bytes": 0})
        monkeypatch.delenv(testpoints.ENV)  # not the agent's: it extracts
        await stack.enter_async_context(
            checked_in_agent(server.port, tenant.agent_token, tmp_path / "agent.log", **REAL_ENGINE)
        )
        pipeline = await edge_pipeline(client, tenant, source, destination)
        first = await client.submit_run(pipeline)
        await client.wait_for_job(first.id)
        assert (await client.get_job(first.id)).state == S.JOB_STATE_SUCCEEDED
        before = await cursor_of(client, pipeline)
        assert before == str(ROWS)
        await add_rows(source)

        await pause.arm()
        job = await client.submit_run(pipeline)
        await pause.reached()
        await client.cancel_job(job.id, "stop the load")
        pause.resume()
        await client.wait_for_job(job.id)
        pause.disarm()

        done = await client.get_job(job.id)
        timeline = await events(client, job.id)
        rows = await fetch(destination, "SELECT count(*), count(DISTINCT id) FROM events")
        stage = stage_table(job.id, STREAM)
        assert await fetch(destination, f"SELECT to_regclass('public.\"{stage}\"')") == [(None,)]
        outputs = (await client.job_outputs(job.id)).streams
        if committed:
            assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
            assert done.error_message == ""
            assert rows == [(ROWS + MORE, ROWS + MORE)]
            assert await cursor_of(client, pipeline) == str(ROWS + MORE)
            assert [(o.rows_extracted, o.rows_loaded) for o in outputs] == [(MORE, MORE)]
            return
        assert done.state == S.JOB_STATE_CANCELLED, (done.error_message, timeline)
        assert done.error_message == "cancelled: stop the load"
        assert rows == [(ROWS, ROWS)]
        assert await cursor_of(client, pipeline) == before
        assert [o.rows_loaded for o in outputs] == [0]  # nothing landed
        # The cancelled run's staging table went, and its part markers with it.
        marked = f"SELECT part FROM _setu_loads WHERE run_id = '{job.id}'"
        assert await fetch(destination, marked) == []

        # The next run reads the same delta again and lands it.
        again = await client.submit_run(pipeline)
        await client.wait_for_job(again.id)
        assert (await client.get_job(again.id)).state == S.JOB_STATE_SUCCEEDED
        assert await fetch(destination, "SELECT count(*) FROM events") == [(ROWS + MORE,)]
        assert await cursor_of(client, pipeline) == str(ROWS + MORE)


async def edge_pipeline(client: SetuClient, tenant: Tenant, source: str, destination: str) -> str:
    """agent → cloud: the agent extracts; the cloud worker loads, resumably."""
    src = await client.create_connection(
        "source", "postgres", postgres_config(source), "agent", str(tenant.agent_id)
    )
    dst = await client.create_connection("dst", "postgres", postgres_config(destination))
    made = await client.create_pipeline(
        "copy", src.id, dst.id, streams=["events"], spec=INCREMENTAL
    )
    return str(made.id)


@pytest.mark.parametrize(
    ("point", "committed"), [(testpoints.APPLY_OPEN, False), (testpoints.APPLIED, True)]
)
async def test_a_cancel_during_an_agents_final_apply_ends_the_run_one_way_or_the_other(
    client_for: Any,
    databases: tuple[str, str],
    tenant: Tenant,
    tmp_path: Path,
    point: str,
    committed: bool,
) -> None:
    """cloud → agent: the agent's load task is held inside its apply (it
    asks the server, not its latest heartbeat, before the COMMIT: rolled
    back, CANCELLED) or just after the COMMIT (every stream landed: the run
    ends SUCCEEDED, with no error message and its cursor advanced)."""
    source, destination = databases
    await source_without_key(source)
    server, client = await client_for(**FAST | {"resumable_load_min_bytes": 0})
    src = await client.create_connection("source", "postgres", postgres_config(source))
    dst = await client.create_connection(
        "dst", "postgres", postgres_config(destination), "agent", str(tenant.agent_id)
    )
    made = await client.create_pipeline(
        "copy", src.id, dst.id, streams=["events"], spec=INCREMENTAL
    )
    async with pause_point(tmp_path / "pause", point) as pause:
        env = REAL_ENGINE | {
            "SETU_AGENT_RESUMABLE_LOAD_MIN_BYTES": "0",
            testpoints.ENV: pause.setting,
        }
        log = tmp_path / "agent.log"
        async with checked_in_agent(server.port, tenant.agent_token, log, **env):
            await pause.arm()
            job = await client.submit_run(made.id)
            await pause.reached()
            await client.cancel_job(job.id, "stop the load")
            pause.resume()
            await client.wait_for_job(job.id)
            pause.disarm()

    done = await client.get_job(job.id)
    timeline = await events(client, job.id)
    stage = stage_table(job.id, STREAM)
    assert await fetch(destination, f"SELECT to_regclass('public.\"{stage}\"')") == [(None,)]
    landed = [(0, 0)]  # the target is created by the apply: rolled back, it is not there
    if (await fetch(destination, "SELECT to_regclass('public.events')"))[0][0] is not None:
        landed = await fetch(destination, "SELECT count(*), count(DISTINCT id) FROM events")
    state = list((await client.get_pipeline_state(made.id)).streams)
    if committed:
        assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
        assert done.error_message == ""
        assert landed == [(ROWS, ROWS)]
        assert await cursor_of(client, made.id) == str(ROWS)
        outputs = (await client.job_outputs(job.id)).streams
        assert [(o.rows_extracted, o.rows_loaded) for o in outputs] == [(ROWS, ROWS)]
        return
    assert done.state == S.JOB_STATE_CANCELLED, (done.error_message, timeline)
    assert done.error_message == "cancelled: stop the load"
    assert landed == [(0, 0)]
    assert state == []  # no cursor saved: the next run reads everything
    marked = f"SELECT part FROM _setu_loads WHERE run_id = '{job.id}'"
    assert await fetch(destination, marked) == []
