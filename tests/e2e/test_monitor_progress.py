"""The run page's progress as a person sees it, in Debian's Chromium (the
`browser` fixture, tests/e2e/conftest.py): with real processes (setu-server
with its cloud worker, and a setu-agent) and runs held mid-extract at a
pause point (tests/pause.py), never a sleep.

- A cloud run held mid-extract shows its stream in the per-stream table, live
  (the page was open before the run started), with the rows it extracted:
  not "No stream has moved yet.".
- That run cancelled with its total not known (a file source has no row
  estimate) draws its Extracted bar short of full.
- An agent run held mid-extract shows Extracted > 0 and its phase before it
  ends, though its lease is long (a heartbeat for the lease alone would come
  minutes later).

tests/e2e/test_live_progress.py checks the same figures through the SDK and on
the template's feeders; here they are checked on the page."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest
from playwright.async_api import Browser, Page

from setu_client import JobState, SetuClient
from setu_engine.support import testpoints
from tests.e2e.monitor_helpers import browser_sign_in
from tests.e2e.test_cancel_mid_read import held
from tests.e2e.test_exactly_once import REAL_ENGINE
from tests.factories import Tenant, make_tenant
from tests.pause import PausePoint, pause_point
from tests.servers import checked_in_agent, free_port, server_process, wait_healthy

pytestmark = pytest.mark.slow

ROWS = 1_000
# 100 rows a batch: 10 parts; held at the first, its rows read.
HELD = testpoints.EXTRACTED_PART.format(index=0)
# Generous for a loaded CI machine; the pages change within a second or two.
WAIT_MS = 30_000


def sqlite_source(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "source.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany(
            "INSERT INTO events VALUES (?, ?)", [(i, f"row {i}") for i in range(1, ROWS + 1)]
        )
    conn.close()
    return path


def csv_source(folder: Path) -> dict[str, str]:
    """A folder of one CSV file: a file source has no row estimate (no total)."""
    files = folder / "files"
    files.mkdir(parents=True)
    lines = ["id,body", *(f"{i},row {i}" for i in range(1, ROWS + 1))]
    (files / "events.csv").write_text("\n".join(lines) + "\n")
    return {"url": f"{files}/", "format": "csv"}


@asynccontextmanager
async def held_server(
    database_url: str, tmp_path: Path, pause: PausePoint | None = None
) -> AsyncIterator[tuple[int, str]]:
    """A setu-server (its cloud worker held at `pause` if given): its gRPC port and monitor URL."""
    http = free_port()
    env = {
        "SETU_DATABASE_URL": database_url,
        "SETU_DATA_DIR": str(tmp_path / "server"),
        "SETU_HTTP_LISTEN": f"127.0.0.1:{http}",
        "SETU_BATCH_ROWS": "100",
        # Staged, so the extract reads in parts (a direct copy has no pause point).
        "SETU_DIRECT_MAX_ROWS": "10",
        # Beats for the lease alone every 100 s: what shows sooner is progress.
        "SETU_LEASE_TTL_SECONDS": "300",
        "SETU_LOG_FORMAT": "text",
    }
    if pause is not None:
        env[testpoints.ENV] = pause.setting  # its cloud worker inherits it
    with server_process(env, tmp_path / "server.log") as (server, port):
        await wait_healthy(port)
        yield port, f"http://127.0.0.1:{http}"
        server.terminate()


async def bar(page: Page, name: str) -> tuple[float, float]:
    """A bar's (value, max) as the browser has them (it clamps value to max)."""
    found = page.locator(f'#run-progress progress[data-progress="{name}"]')
    value, most = await found.evaluate("p => [p.value, p.max]")
    return float(value), float(most)


def count(text: str | None) -> int:
    return int((text or "").replace(",", "").strip() or 0)


async def test_a_held_cloud_runs_stream_shows_live_and_its_cancel_draws_no_full_bar(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path, browser: Browser
) -> None:
    tenant: Tenant = await make_tenant(pool)
    async with (
        pause_point(tmp_path / "pause", HELD) as pause,
        held_server(database_url, tmp_path, pause) as (port, url),
        SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client,
    ):
        src = await client.create_connection("src", "file", csv_source(tmp_path / "data"))
        dst = await client.create_connection(
            "dst", "sqlite", {"path": str(tmp_path / "dst.db"), "create": True}
        )
        pipeline = await client.create_pipeline("p", src.id, dst.id, streams=["events"])
        ready = await client.submit_run(pipeline.id, start=False)
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await browser_sign_in(page, url, tenant.api_key)
        await page.goto(f"{url}/runs/{ready.id}")
        await page.locator("#live-status", has_text="live").wait_for(timeout=WAIT_MS)
        opened_empty = await page.locator("#run-progress", has_text="No stream has moved").count()

        await pause.arm()
        await client.start_job(ready.id)
        await held(pause, client, ready.id)
        # The page was not reloaded: the row comes with a live update.
        row = page.locator('#run-progress tr[data-stream="events"]')
        await row.wait_for(timeout=WAIT_MS)
        moving = count(await row.locator("td").nth(2).text_content())
        empty_while_moving = await page.locator(
            "#run-progress", has_text="No stream has moved"
        ).count()

        await client.cancel_job(ready.id, "enough")
        pause.resume()
        await client.wait_for_job(ready.id)
        pause.disarm()
        cancelled = await client.get_job(ready.id)
        await page.goto(f"{url}/runs/{ready.id}")
        await page.wait_for_selector("#run-header .state-cancelled", timeout=WAIT_MS)
        value, most = await bar(page, "extracted")
        shown = await page.locator("#run-progress .bars").inner_text()

    assert opened_empty == 1, "the page opened on a run that had not started"
    assert moving > 0 and empty_while_moving == 0
    assert cancelled.state == JobState.CANCELLED, cancelled.error_message
    # The file's total is not known: the run ended short of what it would read.
    assert 0 < cancelled.progress.rows_extracted < ROWS, cancelled.progress
    assert cancelled.progress.rows_total == 0, cancelled.progress
    assert value < most, (value, most, shown)
    assert "total not known" in shown, shown


async def test_an_agent_run_held_mid_extract_shows_its_rows_and_phase(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path, browser: Browser
) -> None:
    tenant: Tenant = await make_tenant(pool)
    source = sqlite_source(tmp_path / "data")
    async with (
        pause_point(tmp_path / "pause", HELD) as pause,
        held_server(database_url, tmp_path) as (port, url),
        checked_in_agent(
            port,
            tenant.agent_token,
            tmp_path / "agent.log",
            **(REAL_ENGINE | {testpoints.ENV: pause.setting}),
        ),
        SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client,
    ):
        src = await client.create_connection(
            "src", "sqlite", {"path": str(source)}, "agent", str(tenant.agent_id)
        )
        dst = await client.create_connection(
            "dst", "sqlite", {"path": str(tmp_path / "data" / "dst.db"), "create": True}
        )
        pipeline = await client.create_pipeline("p", src.id, dst.id, streams=["events"])
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await browser_sign_in(page, url, tenant.api_key)
        await pause.arm()
        job = await client.submit_run(pipeline.id)
        await page.goto(f"{url}/runs/{job.id}")
        await page.locator("#live-status", has_text="live").wait_for(timeout=WAIT_MS)
        await held(pause, client, job.id)
        # Live updates bring them while the extract is held: the run has not ended.
        await page.locator("#run-header .phase", has_text="phase: extract").wait_for(
            timeout=WAIT_MS
        )
        extracted = page.locator("#run-progress .bars label", has_text="Extracted")
        await page.locator(
            "#run-progress .bars label", has_text=re.compile(r"Extracted\s+[1-9]")
        ).wait_for(timeout=WAIT_MS)
        shown = await extracted.inner_text()
        value, _ = await bar(page, "extracted")
        state = await client.get_job(job.id)

        await client.cancel_job(job.id, "enough")
        pause.resume()
        await client.wait_for_job(job.id)
        pause.disarm()

    assert not state.terminal, state
    assert value > 0, shown
