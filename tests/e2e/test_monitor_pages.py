"""The monitor's pages in Debian's Chromium (the browser and sign-in of
test_monitor_browser.py): a pipeline's own page, the connections page, the
runs chart's labels, and a phone-sized screen."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from markupsafe import escape
from playwright.async_api import Browser

from setu_client import JobKind as ClientJobKind
from setu_client import JobState, SetuClient
from setu_server.models import Job, JobKind
from setu_server.models import JobState as ServerJobState
from setu_server.server import Running
from setu_server.web import chart
from setu_server.web.render import STATIC
from tests.e2e.monitor_helpers import browser_sign_in, make_copy, signed_in
from tests.factories import Tenant

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"

# Each label's drawn box against the chart's viewBox, measured by the browser.
LABELS_OUTSIDE = """() => {
  const svg = document.querySelector('svg.chart');
  const box = svg.viewBox.baseVal;
  return [...svg.querySelectorAll('text')].map(t => {
    const b = t.getBBox();
    return {text: t.textContent, left: b.x, right: b.x + b.width, top: b.y, bottom: b.y + b.height};
  }).filter(b => b.left < box.x || b.right > box.x + box.width
                 || b.top < box.y || b.bottom > box.y + box.height);
}"""


@pytest.mark.parametrize(
    ("rows", "seconds"),
    [(1_071_880, 72), (987_654_321_012, 3 * 86400 + 3599), (7, 4.5)],
)
async def test_the_charts_labels_stay_inside_its_view_box(
    browser: Browser, rows: int, seconds: float
) -> None:
    since = datetime(2030, 1, 1, tzinfo=UTC)
    finished = Job(
        id=uuid.uuid4(),
        workspace_id=uuid.uuid4(),
        kind=JobKind.RUN,
        state=ServerJobState.SUCCEEDED,
        version=1,
        created_at=since,
        updated_at=since,
        rows_loaded=rows,
        started_at=since,
        finished_at=since + timedelta(seconds=seconds),
    )
    drawn = chart.svg(chart.hours([finished], since))
    style = (STATIC / "monitor.css").read_text()
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    await page.set_content(f"<style>{style}</style><figure class='day'>{drawn}</figure>")

    assert await page.locator("svg.chart text").count() >= 3
    assert await page.evaluate(LABELS_OUTSIDE) == []


async def test_a_pipelines_page_runs_pauses_and_resumes_it(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path, browser: Browser
) -> None:
    copy = await make_copy(client, tmp_path, rows=5)
    incremental = {"sync": {"items": {"mode": "incremental", "cursor": "id"}}}
    await client.update_pipeline(copy.pipeline_id, schedule="0 3 * * *", spec=incremental)
    first = await client.submit_run(copy.pipeline_id)
    await client.wait_for_job(first.id)
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    await browser_sign_in(page, server.http_url, tenant.api_key, "/pipelines")
    await page.click(f'a[href="/pipelines/{copy.pipeline_id}"]')
    await page.wait_for_url(f"{server.http_url}/pipelines/{copy.pipeline_id}")
    scheduled = await page.locator("#pipeline-schedule").inner_text()
    runs = await page.locator("#pipeline-runs tr").get_attribute("data-job")
    state = await page.locator("#pipeline-state tbody tr").inner_text()

    await page.click('form[action$="/pause"] button')
    await page.wait_for_url(f"{server.http_url}/pipelines/{copy.pipeline_id}")
    paused = await page.locator("#pipeline-schedule").inner_text()
    paused_in_api = (await client.get_pipeline(copy.pipeline_id)).paused
    await page.click('form[action$="/run"] button')
    await page.wait_for_selector("#pipeline-ran")
    said = await page.locator("#pipeline-ran").inner_text()
    manual = await page.locator("#pipeline-ran a").get_attribute("href")
    assert manual, said
    ended = await client.wait_for_job(manual.rsplit("/", 1)[-1])
    await page.click('form[action$="/resume"] button')
    await page.wait_for_url(f"{server.http_url}/pipelines/{copy.pipeline_id}")
    resumed = await page.locator("#pipeline-schedule").inner_text()

    assert "0 3 * * *" in scheduled and "03:00:00Z" in scheduled, scheduled
    assert runs == first.id
    assert state.split()[:5] == ["items", "id", "bigint", "4", "5"], state
    assert "paused: schedules make no runs" in paused and paused_in_api
    assert "schedules make no runs; this manual run goes ahead" in said
    assert ended.state is JobState.SUCCEEDED, ended.error_message
    assert "03:00:00Z" in resumed and "paused" not in resumed
    assert not (await client.get_pipeline(copy.pipeline_id)).paused


async def test_connections_discover_from_the_page_and_say_their_settings_in_words(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path, browser: Browser
) -> None:
    copy = await make_copy(client, tmp_path)
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    await browser_sign_in(page, server.http_url, tenant.api_key, "/connections")
    source = page.locator(f"#connection-{copy.source_id}")
    before = await source.inner_text()
    await source.locator('form[action$="/discover"] button').click()
    await page.locator(f"#connection-{copy.source_id} table.catalog").wait_for()
    said = await source.locator('[role="status"]').inner_text()
    job = await source.locator('[role="status"] a').get_attribute("href")
    await source.locator('form[action$="/test"] button').click()
    await page.locator(f"#connection-{copy.source_id} .ok", has_text="Test passed").wait_for()
    tested = await source.locator('[role="status"]').inner_text()
    destination = await page.locator(f"#connection-{copy.destination_id} dl.config").inner_text()

    assert "No catalog yet: Discover streams reads one" in before, before
    assert said.startswith("Discover done: read 1 stream into the catalog below"), said
    assert job and (await client.get_job(job.rsplit("/", 1)[-1])).kind is ClientJobKind.DISCOVER
    assert tested.endswith("(1 table)"), tested
    assert "yes: opened for writing; the file is made when missing" in destination
    assert "True" not in destination


async def test_pipeline_actions_want_the_csrf_token_and_the_pipelines_workspace(
    server: Running, client: SetuClient, tenant: Tenant, other: Tenant, tmp_path: Path
) -> None:
    copy = await make_copy(client, tmp_path)
    async with SetuClient(f"127.0.0.1:{server.port}", other.api_key) as theirs:
        their_copy = await make_copy(theirs, tmp_path / "theirs")
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        bare = [
            (await monitor.post(f"/pipelines/{copy.pipeline_id}/{action}", {}))[0]
            for action in ("pause", "resume")
        ]
        bare.append((await monitor.post(f"/connections/{copy.source_id}/discover", {}))[0])
        token = await monitor.csrf()
        foreign = [
            (await monitor.post(path, {"csrf": token}))[0]
            for path in (
                f"/pipelines/{their_copy.pipeline_id}/pause",
                f"/connections/{their_copy.source_id}/discover",
            )
        ]
        pages = [
            (await monitor.page(f"/pipelines/{pipeline}"))[0]
            for pipeline in (their_copy.pipeline_id, "not-a-pipeline", copy.pipeline_id)
        ]

    assert bare == [403, 403, 403]
    assert foreign == [404, 404]
    assert pages == [404, 404, 200]
    assert not (await client.get_pipeline(copy.pipeline_id)).paused
    assert [j async for j in client.list_jobs()] == []


# The Sign out button's box and how far the page reaches sideways.
FITS = """() => {
  const box = document.querySelector('form.signout button').getBoundingClientRect();
  return {
    signout: [box.left, box.top, box.right, box.bottom],
    width: window.innerWidth, height: window.innerHeight,
    scroll: document.documentElement.scrollWidth,
  };
}"""
PHONE = {"width": 390, "height": 844}


async def test_every_page_fits_a_phones_width_with_sign_out_on_screen(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path, browser: Browser
) -> None:
    copy = await make_copy(client, tmp_path, name="a-pipeline-with-a-rather-long-name")
    await client.update_pipeline(copy.pipeline_id, schedule="0 3 * * *")
    await client.discover_streams(copy.source_id)
    job = await client.submit_run(copy.pipeline_id)
    await client.wait_for_job(job.id)
    page = await browser.new_page(viewport=PHONE)
    await browser_sign_in(page, server.http_url, tenant.api_key)
    paths = [
        "/runs",
        f"/runs/{job.id}",
        "/pipelines",
        f"/pipelines/{copy.pipeline_id}",
        "/connections",
        "/agents",
    ]
    seen = {}
    for path in paths:
        await page.goto(f"{server.http_url}{path}")
        seen[path] = await page.evaluate(FITS)
    await page.goto(f"{server.http_url}/runs")
    await page.screenshot(path=str(ARTIFACTS / "monitor-runs-phone.png"), full_page=True)

    for path, fit in seen.items():
        left, top, right, bottom = fit["signout"]
        assert (fit["width"], fit["height"]) == (390, 844)
        assert min(left, top) >= 0 and right <= 390 and bottom <= 844, (path, fit)
        assert fit["scroll"] <= 390, (path, fit)  # nothing reaches past the screen's edge


HOSTILE = "<script>alert(1)</script>"


async def test_a_pipeline_named_with_markup_renders_inert_on_its_page(
    server: Running, client: SetuClient, tenant: Tenant, tmp_path: Path
) -> None:
    copy = await make_copy(client, tmp_path, name=HOSTILE)
    await client.update_pipeline(copy.pipeline_id, schedule="0 3 * * *", paused=True)
    async with signed_in(server.http_url, tenant.api_key) as monitor:
        status, page = await monitor.page(f"/pipelines/{copy.pipeline_id}")

    assert status == 200
    assert HOSTILE not in page and f"<h1>{escape(HOSTILE)} " in page
    assert "paused: schedules make no runs" in page and "Resume</button>" in page
