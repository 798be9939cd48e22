"""Progress is live for agent runs too (docs/jobs-and-tasks.md, "Progress"):
with real processes (setu-server with its cloud worker, and a setu-agent),
an agent → cloud run whose extract is held mid-read (a pause point, the
first part handed to its upload) shows its phase, rows extracted and the
stream moving before the extract ends, though the agent's lease is long
(a heartbeat for the lease alone would come minutes later); a cancelled
run's bars say what moved; and a first-attempt agent → cloud load does not
say it resumes. The monitor's per-stream table and bars are checked on
what feeds them (setu_server/service/jobs.py live_outputs, _run_progress.html)."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from setu_client import Job as ClientJob
from setu_client import JobState, Phase, SetuClient
from setu_engine.support import testpoints
from setu_server.models import Job, JobKind
from setu_server.models import JobState as ServerJobState
from setu_server.service.jobs import live_outputs
from setu_server.web import reads
from setu_server.web.render import fragment
from tests.databases import postgres_config, scratch_database
from tests.e2e.test_exactly_once import REAL_ENGINE, events
from tests.factories import Tenant, make_tenant
from tests.pause import pause_point
from tests.servers import checked_in_agent, server_process, wait_healthy

pytestmark = pytest.mark.slow

ROWS = 1_000
# 100 rows a batch: 10 parts; held at the first, before any part is stored
# (a stored part's record rides a heartbeat of its own, at the next batch).
HELD = testpoints.EXTRACTED_PART.format(index=0)


def sqlite_source(folder: Path) -> dict[str, str]:
    path = folder / "events.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany(
            "INSERT INTO events VALUES (?, ?)", [(i, f"row {i}") for i in range(1, ROWS + 1)]
        )
    conn.close()
    return {"path": str(path)}


async def first_live(client: SetuClient, job_id: str) -> ClientJob:
    """The first snapshot WatchJob sends with rows extracted, before the
    run ends (a run that ends first fails the test)."""
    async with asyncio.timeout(60):  # a bound, well under the lease's cadence
        async for job in client.watch_job(job_id):
            assert not job.terminal, f"the run ended first: {job.error_message}"
            if job.progress.rows_extracted > 0:
                return job
    raise AssertionError("the watch ended")


async def test_an_agent_extract_reports_live_and_a_first_handed_on_load_does_not_resume(
    database_url: str, pool: asyncpg.Pool, pg_server_url: str, tmp_path: Path
) -> None:
    tenant: Tenant = await make_tenant(pool)
    async with (
        scratch_database(pg_server_url) as destination_url,
        pause_point(tmp_path / "pause", HELD) as pause,
    ):
        env = {
            "SETU_DATABASE_URL": database_url,
            "SETU_DATA_DIR": str(tmp_path / "server"),
            "SETU_BATCH_ROWS": "100",
            # Beats for the lease alone every 100 s: what shows sooner is progress.
            "SETU_LEASE_TTL_SECONDS": "300",
            "SETU_LOG_FORMAT": "text",
        }
        with server_process(env, tmp_path / "server.log") as (server, port):
            await wait_healthy(port)
            agent_env = REAL_ENGINE | {testpoints.ENV: pause.setting}
            async with (
                checked_in_agent(port, tenant.agent_token, tmp_path / "agent.log", **agent_env),
                SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client,
            ):
                src = await client.create_connection(
                    "src", "sqlite", sqlite_source(tmp_path), "agent", str(tenant.agent_id)
                )
                dst = await client.create_connection(
                    "dst", "postgres", postgres_config(destination_url)
                )
                pipeline = await client.create_pipeline("p", src.id, dst.id, streams=["events"])
                await pause.arm()
                held = await client.submit_run(pipeline.id)
                await pause.reached()
                live = await first_live(client, held.id)
                assert live.phase == Phase.EXTRACT and live.state == JobState.RUNNING
                # The agent's estimate is the run's total while it has none.
                assert live.progress.rows_total == ROWS, live.progress
                moving = await client.job_outputs(held.id)
                assert [(s.stream, s.rows_extracted > 0) for s in moving.streams] == [
                    ("events", True)
                ], moving
                await client.cancel_job(held.id, "enough")
                pause.resume()
                await client.wait_for_job(held.id)
                pause.disarm()
                cancelled = await client.get_job(held.id)

                second = await client.submit_run(pipeline.id)
                await client.wait_for_job(second.id)
                done = await client.get_job(second.id)
                timeline = await events(client, second.id)
            server.terminate()

    assert cancelled.state == JobState.CANCELLED, cancelled.error_message
    assert 0 < cancelled.progress.rows_extracted < ROWS
    assert done.state == JobState.SUCCEEDED, (done.error_message, timeline)
    assert (done.progress.rows_extracted, done.progress.rows_loaded) == (ROWS, ROWS)
    assert not any("Resuming" in m for m in timeline), timeline


# ---------------------------------------------------------------- what the monitor draws

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)


def run_job(state: ServerJobState, **counts: object) -> Job:
    return Job(
        id=uuid.uuid4(),
        workspace_id=uuid.uuid4(),
        kind=JobKind.RUN,
        state=state,
        version=3,
        created_at=NOW,
        updated_at=NOW,
        started_at=NOW - timedelta(seconds=10),
        **counts,  # type: ignore[arg-type]
    )


def bar(shown: str, name: str) -> tuple[int, int]:
    found = re.search(rf'<progress max="(\d+)" value="(\d+)" data-progress="{name}">', shown)
    assert found, shown
    return int(found.group(1)), int(found.group(2))


def test_the_per_stream_table_shows_a_stream_while_it_moves() -> None:
    job = run_job(
        ServerJobState.RUNNING,
        rows_extracted=1_000_000,
        stream_progress={"public.events": (1_000_000, 0)},
    )
    view = reads.view_of(job, live_outputs(job, []), [], reads.Names(), NOW)
    shown = fragment("_run_progress.html", {"run": view})
    assert "No stream has moved yet." not in shown
    assert '<tr data-stream="public.events">' in shown and "1,000,000" in shown


def test_a_cancelled_runs_bar_shows_what_moved_not_a_full_bar() -> None:
    unknown_total = run_job(ServerJobState.CANCELLED, rows_extracted=900_000)
    shown = fragment(
        "_run_progress.html",
        {"run": reads.view_of(unknown_total, [], [], reads.Names(), NOW)},
    )
    most, value = bar(shown, "extracted")
    assert value < most or value == 0, shown
    known = run_job(ServerJobState.CANCELLED, rows_extracted=900_000, rows_total=2_000_000)
    shown = fragment(
        "_run_progress.html", {"run": reads.view_of(known, [], [], reads.Names(), NOW)}
    )
    assert bar(shown, "extracted") == (2_000_000, 900_000)


def test_a_filtered_runs_loaded_bar_counts_the_filtered_rows_as_done() -> None:
    job = run_job(
        ServerJobState.SUCCEEDED,
        rows_extracted=8_000,
        rows_loaded=7_592,
        rows_filtered=408,
        rows_total=8_000,
        rows_inserted=7_592,
    )
    shown = fragment("_run_progress.html", {"run": reads.view_of(job, [], [], reads.Names(), NOW)})
    assert bar(shown, "loaded") == (8_000, 8_000)
    assert "7,592 · filtered 408" in shown
