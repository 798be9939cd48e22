"""A database that restarts under a run spends no attempt (docs/errors.md,
"Outage"): the destination PostgreSQL, a server the test starts itself, is
restarted with `pg_ctl restart -m fast` while the cloud worker holds it
mid-load (a pause point after the third part's commit, never a sleep). The
worker's next statement meets the closed session; the task is handed back
(RELEASE_REASON_OUTAGE), retried after the backoff on attempt 1, resumes at
the first part without a marker, and the run succeeds with every row once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client._proto.setu.v1 import common_pb2
from setu_engine.support import testpoints
from tests.databases import own_postgres, scratch_database
from tests.e2e.test_exactly_once import FAST, each_row_once, events, source_without_key
from tests.e2e.test_kill_mid_load import cloud_pipeline, destination_table
from tests.pause import pause_point

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
