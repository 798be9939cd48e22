"""A database that restarts under a run spends no attempt (docs/errors.md,
"Outage"): the destination PostgreSQL, a server the test starts itself, is
restarted with `pg_ctl restart -m fast` while the cloud worker holds it
mid-load (a pause point after the third part's commit, never a sleep). The
worker's next statement meets the closed session; the task is handed back
(RELEASE_REASON_OUTAGE), retried after the backoff on attempt 1, resumes at
the first part without a marker, and the run succeeds with every row once.
A source whose port nothing listens on is refused at its first connect:
not an outage, so its attempts are spent and no free retry is granted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client._proto.setu.v1 import common_pb2
from setu_engine.support import testpoints
from tests.databases import own_postgres, postgres_config, scratch_database
from tests.e2e.test_exactly_once import FAST, each_row_once, events, source_without_key
from tests.e2e.test_kill_mid_load import cloud_pipeline, destination_table
from tests.pause import pause_point
from tests.servers import free_port

pytestmark = pytest.mark.slow

# Part 2 (from 0) committed with its marker: the loader holds its session.
HELD = testpoints.STAGED_PART.format(index=2)


async def test_a_destination_restart_mid_load_spends_no_attempt(
    client_for: Any,
    databases: tuple[str, str],
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    source, _ = databases
    await source_without_key(source)
    async with (
        own_postgres() as restarting,
        scratch_database(restarting.url) as destination,
        pause_point(tmp_path / "pause", HELD) as pause,
    ):
        await destination_table(destination)
        monkeypatch.setenv(testpoints.ENV, pause.setting)
        _, client = await client_for(**FAST | {"resumable_load_min_bytes": 0})
        monkeypatch.delenv(testpoints.ENV)
        pipeline = await cloud_pipeline(client, source, destination)
        await pause.arm()
        job = await client.submit_run(pipeline)
        await pause.reached()
        await restarting.restart()
        pause.close()  # the held loader goes on, into the closed session
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        timeline = await events(client, job.id)
        assert done.state == common_pb2.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
        await each_row_once(destination)

    task = await pool.fetchrow(
        "SELECT attempt, free_retries FROM task WHERE job_id = $1 AND kind = 'migrate'",
        job.id,
    )
    said = "\n".join(timeline)
    assert task is not None and (task["attempt"], task["free_retries"]) == (1, 1), said
    # Where it stood, as the run's reporter kept it: in the load, mid-stream.
    lost = [m for m in timeline if "lost its database on cloud at load of public.events" in m]
    assert len(lost) == 1 and "without spending an attempt (free retry 1 of 5" in lost[0], timeline
    print("outage events:", lost)


async def test_a_source_on_a_port_nothing_listens_on_spends_its_attempts(
    client_for: Any, databases: tuple[str, str], pool: asyncpg.Pool
) -> None:
    # Refused at the first connect, with no outage before it: a wrong
    # address, not a database away, so no free retry is granted.
    _, destination = databases
    _, client = await client_for(**FAST)
    nowhere = {
        "host": "127.0.0.1",
        "port": free_port(),
        "database": "nowhere",
        "user": "postgres",
        "ssl": "disable",
    }
    src = await client.create_connection("nowhere", "postgres", nowhere)
    dst = await client.create_connection("destination", "postgres", postgres_config(destination))
    made = await client.create_pipeline("copy", src.id, dst.id, streams=["events"])
    job = await client.submit_run(str(made.id))
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    timeline = await events(client, job.id)
    said = "\n".join(timeline)
    assert done.state == common_pb2.JOB_STATE_FAILED, said
    task = await pool.fetchrow(
        "SELECT attempt, max_attempts, free_retries FROM task"
        " WHERE job_id = $1 AND kind = 'migrate'",
        job.id,
    )
    assert task is not None and task["attempt"] == task["max_attempts"], said
    assert task["free_retries"] == 0, said
    assert not any("without spending an attempt" in m for m in timeline), said
    assert "cannot connect to 127.0.0.1" in done.error_message, said
