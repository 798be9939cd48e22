"""The run monitor in a real headless browser (Debian's Chromium, driven by
Playwright): sign in, watch a run succeed live, cancel another from the page.

Screenshots of the runs list and of a run land in tests/artifacts/ for
people to look at. The browser is installed by scripts/ensure_test_tools.sh
(`make test` runs it); without it this test fails, it never skips. The
`browser` fixture is tests/e2e/conftest.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, Route

from setu_client import JobState, SetuClient
from setu_server.server import Running
from tests.e2e.monitor_helpers import browser_sign_in, check_in, make_copy
from tests.factories import Tenant

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
# Generous for a loaded CI machine; a passing run takes a second or two.
WAIT_MS = 30_000

# Counts what the page changes in place: a reload would start it from zero.
WATCH_PAGE = """() => {
  window.monitorTest = {frames: 0, loadedValues: [], eventCounts: []};
  const record = () => {
    const t = window.monitorTest;
    t.frames += 1;
    t.loadedValues.push(Number(document.querySelector('progress[data-progress="loaded"]').value));
    t.eventCounts.push(document.querySelectorAll('#run-events li').length);
  };
  new MutationObserver(record).observe(document.getElementById('run-progress'), {childList: true});
}"""


# Staged (more rows than a direct copy takes), in batches: progress moves in steps.
@pytest.mark.server(batch_rows=10, direct_max_rows=10)
async def test_a_run_succeeds_live_and_another_is_cancelled_from_the_page(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path, browser: Browser
) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    copy = await make_copy(client, tmp_path / "copy", rows=45)
    ready = await client.submit_run(copy.pipeline_id, start=False)
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    await browser_sign_in(page, server.http_url, tenant.api_key)

    await page.goto(f"{server.http_url}/runs/{ready.id}")
    # Selectors, not wait_for_function: the page's CSP forbids the eval it needs.
    await page.locator("#live-status", has_text="live").wait_for(timeout=WAIT_MS)
    before = await page.locator("#run-events li").count()
    await page.evaluate(WATCH_PAGE)
    await client.start_job(ready.id)
    await page.wait_for_selector("#run-header .state-succeeded", timeout=WAIT_MS)
    seen = await page.evaluate("window.monitorTest")
    after = await page.locator("#run-events li").count()
    loaded = await page.locator('#run-progress progress[data-progress="loaded"]').get_attribute(
        "value"
    )
    await page.locator("#live-status", has_text="ended").wait_for(timeout=WAIT_MS)
    await page.screenshot(path=str(ARTIFACTS / "monitor-run.png"), full_page=True)

    # A run on an agent that is online but takes no work waits: cancel it.
    await check_in(server.port, tenant.agent_token)
    edge = await client.create_connection(
        "edge-src",
        "sqlite",
        {"path": "/nowhere.db"},
        placement="agent",
        agent_id=str(tenant.agent_id),
    )
    waiting_pipeline = await client.create_pipeline("edge", edge.id, copy.destination_id)
    waiting = await client.submit_run(waiting_pipeline.id)
    await page.goto(f"{server.http_url}/runs/{waiting.id}")
    await page.click("form.cancel button")
    await page.wait_for_selector("#run-header .state-cancelled", timeout=WAIT_MS)
    cancelled = await client.get_job(waiting.id)

    await page.goto(f"{server.http_url}/runs")
    await page.wait_for_selector(f'tr[data-job="{ready.id}"] .state-succeeded')
    await page.screenshot(path=str(ARTIFACTS / "monitor-runs.png"), full_page=True)

    assert seen["frames"] >= 1, "the page never changed in place"
    assert seen["loadedValues"][-1] == 45 and int(loaded or 0) == 45
    assert after > before, (before, after)
    assert seen["eventCounts"][-1] == after
    assert cancelled.state is JobState.CANCELLED


def live_requests(page: Page, job_id: str) -> list[str]:
    """The URLs of the run's stream the page requests, as it requests them."""
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if f"/runs/{job_id}/live" in r.url else None)
    return seen


async def test_a_finished_runs_page_settles_without_asking_again(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path, browser: Browser
) -> None:
    copy = await make_copy(client, tmp_path)
    job = await client.submit_run(copy.pipeline_id)
    done = await client.wait_for_job(job.id)
    page = await browser.new_page()
    await browser_sign_in(page, server.http_url, tenant.api_key)
    asked = live_requests(page, job.id)

    await page.goto(f"{server.http_url}/runs/{job.id}")
    # The page closed the stream for good: after the server's `end` (not
    # after a stream that dropped without one).
    await page.wait_for_selector("#run[data-stream]", timeout=WAIT_MS)
    how = await page.locator("#run").get_attribute("data-stream")
    status = await page.locator("#live-status").text_content()
    text = await page.locator("#run").inner_text()

    assert done.state is JobState.SUCCEEDED, done.error_message
    assert await page.locator("#run-header .state-succeeded").count() == 1
    assert how == "ended" and status == "ended" and "reconnecting" not in text
    assert len(asked) == 1, asked


async def test_a_finished_runs_stream_that_drops_is_not_reopened(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path, browser: Browser
) -> None:
    # A stream that closes with no `end` (a server stopping, a proxy's cut):
    # the run is over, so the page has nothing to ask for again.
    copy = await make_copy(client, tmp_path)
    job = await client.submit_run(copy.pipeline_id)
    await client.wait_for_job(job.id)
    page = await browser.new_page()
    await browser_sign_in(page, server.http_url, tenant.api_key)
    asked = live_requests(page, job.id)
    # retry: 50 ms, so a page that did reconnect would do it at once.
    await page.route(
        re.compile(r"/runs/[^/]+/live"),
        lambda route: route.fulfill(
            status=200, headers={"Content-Type": "text/event-stream"}, body="retry: 50\n\n"
        ),
    )

    await page.goto(f"{server.http_url}/runs/{job.id}")
    await page.wait_for_selector('#run[data-stream="closed"]', timeout=WAIT_MS)
    text = await page.locator("#run").inner_text()

    assert await page.locator("#live-status").text_content() == "ended"
    assert "reconnecting" not in text
    assert len(asked) == 1, asked


async def test_a_running_runs_stream_reconnects_after_a_network_error(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path, browser: Browser
) -> None:
    copy = await make_copy(client, tmp_path)
    ready = await client.submit_run(copy.pipeline_id, start=False)
    page = await browser.new_page()
    await browser_sign_in(page, server.http_url, tenant.api_key)
    asked = live_requests(page, ready.id)
    cut: list[str] = []

    async def cut_the_first(route: Route) -> None:
        if not cut:
            cut.append(route.request.url)
            await route.abort("connectionreset")
        else:
            await route.continue_()

    await page.route(re.compile(r"/runs/[^/]+/live"), cut_the_first)
    await page.goto(f"{server.http_url}/runs/{ready.id}")
    await page.locator("#live-status", has_text="live").wait_for(timeout=WAIT_MS)
    await client.start_job(ready.id)
    await page.wait_for_selector('#run[data-stream="ended"]', timeout=WAIT_MS)

    assert len(cut) == 1 and len(asked) == 2, asked
    assert await page.locator("#run-header .state-succeeded").count() == 1
