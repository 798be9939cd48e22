"""The extract resumes where it stopped (docs/flows.md, "An extract resumes
at the first part not stored"), with real processes: a 2,000,000-row SQLite
table into PostgreSQL, in 20 parts, whose runtime is stopped with SIGTERM
three times mid-read (a pause point holds each attempt once it has read
HELD_AFTER parts, never a sleep): the cloud worker of a cloud -> cloud run
(its supervisor starts the next) and the setu-agent of an agent -> cloud run
(the test starts the next).

Each stop hands the task back; the next attempt verifies the parts the run's
books record, resumes at the first part not stored, and so gets further each
time. The run ends SUCCEEDED with every row once, its tasks still on attempt
1, and the rows the source counted read in all attempts (`source rows read
in this attempt: N` on the timeline, by the provider's own count) at most
1.25 x the table: printed, then asserted. Without the resume every attempt
reads from row 0 (1.9 x the table)."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client._proto.setu.v1 import common_pb2
from setu_engine.support import testpoints
from tests.databases import postgres_config
from tests.e2e.test_drain_restarts import GRACE, RESTARTS, hand_backs, restarted_mid_extract
from tests.e2e.test_exactly_once import FAST, REAL_ENGINE, events
from tests.factories import Tenant
from tests.servers import checked_in_agent

pytestmark = pytest.mark.slow

TABLE_ROWS = 2_000_000
PART_ROWS = 100_000  # 20 parts
# Every attempt is held once it has read this many parts, wherever it began:
# the first at part 6 of 20, the next ones 5 or 6 parts further on (a part
# held may have been stored and recorded before its worker stopped).
HELD_AFTER = 6
HELD = testpoints.READ_PART.format(count=HELD_AFTER)
BOUND = 1.25
RESUMED = re.compile(r"resuming the extract at part (\d+):")
# FAST's 3 s lease is short for a worker encoding 100,000-row parts on a
# loaded machine: a lapsed lease would spend an attempt (the reaper's), which
# this test counts. Hand-backs do not wait for it.
SETTINGS = FAST | GRACE | {"lease_ttl_seconds": 30}
READ = re.compile(r"source rows read in this attempt: ([\d,]+)")


def sqlite_events(folder: Path) -> dict[str, Any]:
    """events(id, body, n): 2,000,000 narrow rows, made inside SQLite."""
    path = folder / "events.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT, n INTEGER)")
        conn.execute(
            "WITH RECURSIVE i(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM i WHERE v < ?) "
            "INSERT INTO events SELECT v, 'r' || v, v % 97 FROM i",
            (TABLE_ROWS,),
        )
    conn.close()
    return {"path": str(path)}


async def events_table(url: str) -> None:
    """The target, with no key: a row loaded twice shows."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE events (id bigint, body text, n bigint)")
    finally:
        await conn.close()


async def pipeline_from_sqlite(
    client: Any, source: dict[str, Any], destination: str, placed: tuple[str, str]
) -> str:
    src = await client.create_connection("source", "sqlite", source, *placed)
    dst = await client.create_connection("destination", "postgres", postgres_config(destination))
    made = await client.create_pipeline("copy", src.id, dst.id, streams=["events"])
    return str(made.id)


async def resumed_once(
    client: Any, pool: asyncpg.Pool, destination: str, job_id: str, *, resumes_said: int
) -> None:
    """SUCCEEDED, every row once, attempt 1, and the source read <= BOUND x."""
    await client.wait_for_job(job_id)
    done = await client.get_job(job_id)
    timeline = await events(client, job_id)
    said = "\n".join(timeline)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, (done.error_message, said)
    conn = await asyncpg.connect(destination)
    try:
        counted = await conn.fetchrow("SELECT count(*), count(DISTINCT id) FROM events")
    finally:
        await conn.close()
    assert tuple(counted) == (TABLE_ROWS, TABLE_ROWS)
    attempts = await pool.fetch("SELECT kind, attempt FROM task WHERE job_id = $1", job_id)
    assert attempts and all(row["attempt"] == 1 for row in attempts), (attempts, said)
    handed = [m for m in timeline if "handed back at extract of" in m]
    assert len(handed) == RESTARTS, said
    assert all("no attempt spent (attempt 1 of 3)" in m for m in handed), said
    reads = [int(n.replace(",", "")) for m in timeline for n in READ.findall(m)]
    # One count per stop (in its hand-back) and one for the attempt that staged.
    assert len(reads) == RESTARTS + 1, said
    total = sum(reads)
    print(
        f"rows read from the source in total / table rows: {total:,} / {TABLE_ROWS:,} "
        f"= {total / TABLE_ROWS:.3f} (per attempt: {', '.join(f'{r:,}' for r in reads)})"
    )
    print("resumed:", *[m for m in timeline if "resuming the extract" in m], sep="\n  ")
    assert total <= BOUND * TABLE_ROWS, said
    # Each attempt after the first built on the parts the ones before stored,
    # verified, further on each time.
    resumed = [int(n) for m in timeline for n in RESUMED.findall(m)]
    assert len(resumed) == resumes_said, said
    assert resumed == sorted(set(resumed)) and resumed[0] >= HELD_AFTER - 1, said


async def test_a_2m_row_cloud_run_resumes_its_extract_after_each_sigterm_of_its_worker(
    client_for: Any,
    databases: tuple[str, str],
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    _, destination = databases
    source = sqlite_events(tmp_path)
    await events_table(destination)
    folder = tmp_path / "pause"
    # The cloud workers inherit the setting from their server.
    monkeypatch.setenv(testpoints.ENV, testpoints.setting(HELD, folder))
    server, client = await client_for(**SETTINGS | {"batch_rows": PART_ROWS})
    monkeypatch.delenv(testpoints.ENV)
    workers = server.services.workers
    assert workers is not None
    heard = hand_backs(server)
    pipeline = await pipeline_from_sqlite(client, source, destination, ("cloud", ""))

    async def submit() -> str:
        return str((await client.submit_run(pipeline)).id)

    async def stop_the_worker() -> None:
        (await workers.process()).terminate()

    job_id = await restarted_mid_extract(folder, heard, submit, stop_the_worker, point=HELD)
    await resumed_once(client, pool, destination, job_id, resumes_said=RESTARTS)
    assert workers.started == RESTARTS + 1


async def test_a_2m_row_agent_to_cloud_run_resumes_its_extract_after_each_sigterm_of_its_agent(
    client_for: Any,
    databases: tuple[str, str],
    pool: asyncpg.Pool,
    tenant: Tenant,
    tmp_path: Path,
) -> None:
    _, destination = databases
    source = sqlite_events(tmp_path)
    await events_table(destination)
    folder = tmp_path / "pause"
    server, client = await client_for(**SETTINGS)
    heard = hand_backs(server)
    pipeline = await pipeline_from_sqlite(
        client, source, destination, ("agent", str(tenant.agent_id))
    )
    env = REAL_ENGINE | {
        testpoints.ENV: testpoints.setting(HELD, folder),
        "SETU_GRACE_SECONDS": str(GRACE["grace_seconds"]),
        "SETU_AGENT_BATCH_ROWS": str(PART_ROWS),
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
            assert await asyncio.wait_for(agents[-1].wait(), 60) == 0
            await start_agent()

        job_id = await restarted_mid_extract(
            folder, heard, submit, stop_the_agent, next_agent, point=HELD
        )
        # An agent's notes reach the timeline with its result: the last one's.
        await resumed_once(client, pool, destination, job_id, resumes_said=1)
    assert len(agents) == RESTARTS + 1
