"""A cancel that lands in the middle of a source's read ends cleanly
(docs/flows.md, "Cancel"): with real processes (setu-server with its cloud
worker, and a setu-agent), a run whose extract is held mid-read at a pause
point (setu_engine/support/testpoints.py: the third part handed to its upload,
the source's cursor open) is cancelled there, for a SQLite, a PostgreSQL
and a file source, read by the cloud worker and by an agent.

The job ends CANCELLED with the cancel's reason, and no process logs an
ERROR line or a traceback, then or when it stops afterwards: no reader left
running with an exception nobody retrieves, no async generator closed by
the garbage collector (or by the loop's shutdown) after its connection was
closed, and no "fix the spec" hint on what was a cancel."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_engine.support import testpoints
from tests.databases import postgres_config, scratch_database
from tests.e2e.test_exactly_once import REAL_ENGINE, ROWS, events, source_without_key
from tests.factories import Tenant, make_tenant
from tests.pause import PausePoint, pause_point
from tests.servers import checked_in_agent, server_process, wait_healthy

S = common_pb2
pytestmark = pytest.mark.slow

# 100 rows a batch (the servers' and the agent's): 30 parts; held at the third.
HELD = testpoints.EXTRACTED_PART.format(index=2)
REASON = "wrong table"
# PostgreSQL reads an incremental stream in cursor order, as one COPY that a
# helper task pumps and the read cuts into batches: the cancel meets both.
SPECS: dict[str, dict[str, Any]] = {
    "postgres": {"sync": {"events": {"mode": "incremental", "cursor": "id"}}}
}


def sqlite_source(folder: Path) -> tuple[str, dict[str, Any]]:
    path = folder / "events.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany(
            "INSERT INTO events VALUES (?, ?)", [(i, f"row {i}") for i in range(1, ROWS + 1)]
        )
    conn.close()
    return "sqlite", {"path": str(path)}


def file_source(folder: Path) -> tuple[str, dict[str, Any]]:
    files = folder / "files"
    files.mkdir()
    lines = ["id,body", *(f"{i},row {i}" for i in range(1, ROWS + 1))]
    (files / "events.csv").write_text("\n".join(lines) + "\n")
    return "file", {"url": f"{files}/", "format": "csv"}


async def postgres_source(url: str) -> tuple[str, dict[str, Any]]:
    await source_without_key(url)
    return "postgres", postgres_config(url)


# An ERROR line as the server and its worker write it (text, asked for
# below) and as the agent does (JSON); a traceback, printed or in a JSON
# line; an exception Python could not raise; the wrong hint.
TROUBLE = ("level=error", '"level": "error"', "Traceback", "Exception ignored", "fix the spec")


def trouble(log: Path) -> list[str]:
    """A log's ERROR lines, tracebacks and ignored exceptions."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [line for line in text.splitlines() if any(t in line for t in TROUBLE)]


async def stopped(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and the exit awaited: what a process logs as it shuts down
    (the loop closing the async generators still open) is in its log."""
    proc.terminate()
    await asyncio.to_thread(proc.wait, 30)


async def held(pause: PausePoint, client: SetuClient, job_id: str) -> None:
    """Until the reader waits at the pause point; a run that ends first
    (it never reached it) fails the test at once, saying why."""
    reached = asyncio.create_task(pause.reached())
    ended = asyncio.create_task(client.wait_for_job(job_id))
    await asyncio.wait({reached, ended}, return_when=asyncio.FIRST_COMPLETED)
    if not reached.done():
        reached.cancel()
        done = await client.get_job(job_id)
        raise AssertionError(f"the run ended before its read was held: {done.error_message}")
    ended.cancel()
    await asyncio.gather(ended, return_exceptions=True)
    reached.result()


def waiter(needle: bytes) -> tuple[asyncio.Event, Callable[[bytes], None]]:
    seen = asyncio.Event()

    def on_line(line: bytes) -> None:
        if needle in line:
            seen.set()

    return seen, on_line


@pytest.mark.parametrize("provider", ["sqlite", "postgres", "file"])
@pytest.mark.parametrize("reader", ["cloud", "agent"])
async def test_a_cancel_mid_read_ends_the_run_cancelled_with_nothing_logged_as_an_error(
    database_url: str,
    pool: asyncpg.Pool,
    pg_server_url: str,
    tmp_path: Path,
    provider: str,
    reader: str,
) -> None:
    tenant: Tenant = await make_tenant(pool)
    server_log, agent_log = tmp_path / "server.log", tmp_path / "agent.log"
    async with (
        scratch_database(pg_server_url) as source_url,
        scratch_database(pg_server_url) as destination_url,
        pause_point(tmp_path / "pause", HELD) as pause,
    ):
        if provider == "sqlite":
            source = sqlite_source(tmp_path)
        elif provider == "file":
            source = file_source(tmp_path)
        else:
            source = await postgres_source(source_url)
        env = {
            "SETU_DATABASE_URL": database_url,
            "SETU_DATA_DIR": str(tmp_path / "server"),
            "SETU_DIRECT_MAX_ROWS": "0",  # staged: the read goes part by part
            "SETU_BATCH_ROWS": "100",
            "SETU_LEASE_TTL_SECONDS": "3",  # the agent's heartbeats: one a second
            "SETU_LOG_FORMAT": "text",
        }
        if reader == "cloud":
            env[testpoints.ENV] = pause.setting  # its cloud worker inherits it
        with server_process(env, server_log) as (server, port):
            await wait_healthy(port)
            cancel_heard, on_line = waiter(b"cancel requested")
            agent_env = dict(REAL_ENGINE)
            if reader == "agent":
                agent_env[testpoints.ENV] = pause.setting
            async with (
                checked_in_agent(port, tenant.agent_token, agent_log, on_line, **agent_env) as edge,
                SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client,
            ):
                placed = ("agent", str(tenant.agent_id)) if reader == "agent" else ("cloud", "")
                src = await client.create_connection("src", source[0], source[1], *placed)
                dst = await client.create_connection(
                    "dst", "postgres", postgres_config(destination_url)
                )
                pipeline = await client.create_pipeline(
                    "p", src.id, dst.id, streams=["events"], spec=SPECS.get(provider)
                )
                await pause.arm()
                job = await client.submit_run(pipeline.id)
                await held(pause, client, job.id)
                await client.cancel_job(job.id, REASON)
                if reader == "agent":
                    # The agent hears of it from a heartbeat, which goes on
                    # while the read is held: it stops at its next batch.
                    async with asyncio.timeout(30):
                        await cancel_heard.wait()
                pause.resume()
                await client.wait_for_job(job.id)
                pause.disarm()
                done = await client.get_job(job.id)
                timeline = await events(client, job.id)
                edge.terminate()
                await edge.wait()
            await stopped(server)

    assert done.state == S.JOB_STATE_CANCELLED, (done.error_message, timeline)
    assert done.error_message == f"cancelled: {REASON}"
    assert not any("fix the spec" in m for m in timeline), timeline
    assert trouble(server_log) == []
    assert trouble(agent_log) == []
