"""Agents by name wherever a person reads which runtime did something: the
CLI (`connections test`, `jobs get`, `jobs list`, `jobs events`), and the
monitor's runs list and run page in Chromium. A real server, a real
setu-agent process running the real engine, the real `setu` command."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from playwright.async_api import Browser

from setu_client import JobState, SetuClient
from setu_client.clock import SystemClock
from setu_server.server import Running
from setu_server.service.admin import AdminService
from tests.e2e.monitor_helpers import browser_sign_in
from tests.e2e.test_cli_data import setu
from tests.factories import Tenant
from tests.servers import checked_in_agent

# The tenant's agent (tests/factories.py).
NAME = "test agent"
# The engine's handlers, not the test ones.
REAL_ENGINE = {"SETU_AGENT_EXTRA_HANDLERS": ""}
AN_ID = re.compile(r"agent:[0-9a-f]{8}-")
WAIT_MS = 30_000


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    return {"data_dir": tmp_path / "server", "task_retry_backoff_seconds": 0.05}


@pytest.fixture
def env(server: Running, tenant: Tenant) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    return base | {"SETU_SERVER": f"127.0.0.1:{server.port}", "SETU_API_KEY": tenant.api_key}


async def edge_run(client: SetuClient, tenant: Tenant, folder: Path) -> tuple[str, str]:
    """(the source connection's id, a finished run's id): SQLite on the
    tenant's agent → SQLite in the cloud, the agent running."""
    with sqlite3.connect(folder / "edge.db") as db:
        db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY)")
        db.executemany("INSERT INTO items VALUES (?)", [(i,) for i in range(5)])
    source = await client.create_connection(
        "edge-src", "sqlite", {"path": str(folder / "edge.db")}, "agent", str(tenant.agent_id)
    )
    into = await client.create_connection(
        "cloud-dst", "sqlite", {"path": str(folder / "dst.db"), "create": True}
    )
    pipeline = await client.create_pipeline("edge-copy", source.id, into.id, streams=["items"])
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    assert done.state is JobState.SUCCEEDED, done.error_message
    return source.id, job.id


async def test_the_cli_names_the_agent_and_keeps_its_id_in_json(
    server: Running,
    client: SetuClient,
    tenant: Tenant,
    pool: asyncpg.Pool,
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    async with checked_in_agent(
        server.port, tenant.agent_token, tmp_path / "agent.log", **REAL_ENGINE
    ):
        _, job_id = await edge_run(client, tenant, tmp_path)
        code, tested, _ = await setu("connections", "test", "edge-src", env=env)
    _, shown, _ = await setu("jobs", "get", job_id, env=env)
    _, listed, _ = await setu("jobs", "list", env=env)
    _, said, _ = await setu("jobs", "events", job_id, env=env)
    _, as_json, _ = await setu("jobs", "get", job_id, "--json", env=env)
    document = json.loads(as_json)

    # The agent deactivated and its host registered again under the same
    # name: two agents of that name, so a label needs the short id.
    admin = AdminService(pool, SystemClock())
    await admin.deactivate_agent(tenant.agent_id)
    await admin.create_agent(tenant.workspace_id, NAME)
    _, ambiguous, _ = await setu("jobs", "get", job_id, env=env)

    assert code == 0 and f"(tested on agent {NAME}; job " in tested, tested
    assert re.search(rf"runtimes: +extract agent {NAME}, load cloud\n", shown), shown
    row = next(line for line in listed.splitlines() if line.startswith(job_id))
    assert f" agent {NAME} → cloud " in row, listed
    assert f"Dispatched extract to agent {NAME}" in said and not AN_ID.search(said), said
    assert document["extract_runtime"] == f"agent:{tenant.agent_id}"
    assert document["extract_agent_name"] == NAME and document["load_runtime"] == "cloud"
    assert document["extract_runtime_label"] == f"agent {NAME}"
    short = str(tenant.agent_id)[:8]
    assert f"extract agent {NAME} ({short}), load cloud" in ambiguous, ambiguous


async def test_the_monitor_names_the_agent_in_the_runs_list_and_the_run_page(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path, browser: Browser
) -> None:
    async with checked_in_agent(
        server.port, tenant.agent_token, tmp_path / "agent.log", **REAL_ENGINE
    ):
        _, job_id = await edge_run(client, tenant, tmp_path)
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    await browser_sign_in(page, server.http_url, tenant.api_key)
    row = page.locator(f'tr[data-job="{job_id}"]')
    await row.wait_for(timeout=WAIT_MS)
    cells = await row.locator("td").all_inner_texts()
    await page.goto(f"{server.http_url}/runs/{job_id}")
    await page.locator("#live-status", has_text="ended").wait_for(timeout=WAIT_MS)
    placement = await page.locator("#run-placement").inner_html()
    timeline = "\n".join(await page.locator("#run-events li").all_inner_texts())
    await page.goto(f"{server.http_url}/connections")
    placed = await page.locator("h2", has_text="edge-src").inner_text()

    assert cells[2:4] == [f"agent {NAME}", "cloud"], cells
    assert f"extract on agent {NAME}" in placement and "load on cloud" in placement
    assert f"Dispatched extract to agent {NAME}" in timeline, timeline
    assert placed.endswith(f"sqlite · agent {NAME}"), placed
    assert not AN_ID.search(timeline) and str(tenant.agent_id) not in placement + timeline
