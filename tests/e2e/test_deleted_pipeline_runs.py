"""A run outlives its pipeline only once it has ended: deleting a pipeline
cancels its READY runs (setu_server/service/pipelines.py), and a run left
without a pipeline (from before that rule) is refused or fails with a
clear message, never INTERNAL (issue 23, audit item 2)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from setu_client._proto.setu.v1 import common_pb2
from setu_client.errors import FailedPrecondition
from tests.e2e.test_cloud_run_lifecycle import fill, pipeline

S = common_pb2


async def test_deleting_a_pipeline_cancels_its_ready_runs_and_they_cannot_start(
    client_for: Any, databases: tuple[str, str]
) -> None:
    source, destination = databases
    await fill(source, "items", 5)
    _, client = await client_for(worker_concurrency=0)
    pipeline_id = await pipeline(client, source, destination)
    ready = await client.submit_run(pipeline_id, start=False)
    assert ready.state == S.JOB_STATE_READY

    await client.delete_pipeline(pipeline_id)

    cancelled = await client.get_job(ready.id)
    assert cancelled.state == S.JOB_STATE_CANCELLED
    assert cancelled.error_message == "cancelled: its pipeline copy was deleted"
    events = [e.message async for e in client.job_events(ready.id)]
    assert events[-1] == "Cancelled: its pipeline copy was deleted before the run started"
    with pytest.raises(FailedPrecondition, match="is cancelled: it cannot become pending"):
        await client.start_job(ready.id)


async def test_a_run_whose_pipeline_is_gone_fails_at_once_with_a_clear_message(
    client_for: Any, databases: tuple[str, str], pool: asyncpg.Pool
) -> None:
    source, destination = databases
    await fill(source, "items", 5)
    _, idle = await client_for(worker_concurrency=0)  # nobody leases yet
    pipeline_id = await pipeline(idle, source, destination)
    pending = await idle.submit_run(pipeline_id)
    ready = await idle.submit_run(pipeline_id, start=False)
    # Runs unlinked as a delete from before the rule left them (ON DELETE SET NULL).
    await pool.execute("UPDATE job SET pipeline_id = NULL WHERE pipeline_id = $1", pipeline_id)

    with pytest.raises(FailedPrecondition, match="its pipeline was deleted; nothing to start"):
        await idle.start_job(ready.id)

    _, busy = await client_for()  # a cloud worker now: it leases the pending run
    await busy.wait_for_job(pending.id)
    failed = await busy.get_job(pending.id)
    assert failed.state == S.JOB_STATE_FAILED
    assert failed.error_message == (
        f"runtime migrate: run {pending.id}: its pipeline copy was deleted; nothing to run"
    )
    attempts = await pool.fetch("SELECT attempt FROM task WHERE job_id = $1", pending.id)
    assert [r["attempt"] for r in attempts] == [1], "refused for good, not retried"
