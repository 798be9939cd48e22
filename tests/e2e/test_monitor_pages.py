"""The monitor's pages in Debian's Chromium (the browser and sign-in of
test_monitor_browser.py): a pipeline's own page, the connections page, the
runs chart's labels, and a phone-sized screen."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from playwright.async_api import Browser

from setu_server.models import Job, JobKind, JobState
from setu_server.web import chart
from setu_server.web.render import STATIC

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
        state=JobState.SUCCEEDED,
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
