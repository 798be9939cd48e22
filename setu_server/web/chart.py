"""Rows moved and run durations over the last 24 hours, drawn as SVG on the
server: hourly bars of rows loaded, and a line of the longest run per hour.
No chart library reaches the browser."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from markupsafe import Markup, escape

from setu_server.models import Job, JobFilter, JobKind
from setu_server.web.deps import MonitorDeps
from setu_server.web.render import count, duration

HOURS = 24
# Enough for a busy day; the chart says so when a day holds more.
MAX_RUNS = 2000
PAGE = 500

WIDTH, HEIGHT = 1100, 170
TOP, BOTTOM = 16, 28
# The labels' font size (monitor.css: svg.chart .label) and a width per
# character no digit or letter of a sans-serif face exceeds at that size:
# the side margins are sized from the labels' own text, so none is clipped.
LABEL_PX = 11
CHAR_EM = 0.65
GAP = 6  # between a label and the plot
MIN_MARGIN = 24


@dataclass(frozen=True)
class Hour:
    start: datetime
    runs: int
    rows: int
    longest: float  # seconds; 0 when no run of this hour finished


async def last_day(deps: MonitorDeps, workspace_id: UUID) -> tuple[list[Hour], bool]:
    """The last 24 hours of runs, hour by hour, and whether some were left out."""
    now = deps.clock.now()
    since = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=HOURS - 1)
    where = JobFilter(kinds=frozenset({JobKind.RUN}), created_after=since)
    jobs: list[Job] = []
    token = ""
    while len(jobs) < MAX_RUNS:
        page, token = await deps.jobs.list_jobs(workspace_id, where, PAGE, token)
        jobs.extend(page)
        if not token:
            break
    return hours(jobs, since), bool(token)


def hours(jobs: Iterable[Job], since: datetime) -> list[Hour]:
    runs = [0] * HOURS
    rows = [0] * HOURS
    longest = [0.0] * HOURS
    for job in jobs:
        slot = int((job.created_at - since).total_seconds() // 3600)
        if not 0 <= slot < HOURS:
            continue
        runs[slot] += 1
        rows[slot] += job.rows_loaded
        if job.started_at and job.finished_at:
            took = (job.finished_at - job.started_at).total_seconds()
            longest[slot] = max(longest[slot], took)
    return [Hour(since + timedelta(hours=i), runs[i], rows[i], longest[i]) for i in range(HOURS)]


def short_count(value: int) -> str:
    """A count in at most four significant characters: 950, 45.2k, 1.07M."""
    for unit, size in (("", 1), ("k", 10**3), ("M", 10**6), ("B", 10**9)):
        shown = float(f"{value / size:.3g}")
        if shown < 1000:
            return f"{shown:g}{unit}"
    return f"{value / 10**12:.3g}T"


def label_width(text: str) -> float:
    """At most how wide `text` draws as a label, in viewBox units."""
    return len(text) * CHAR_EM * LABEL_PX


def svg(day: list[Hour]) -> Markup:
    """The chart as an inline <svg>, with a <title> on every bar and point."""
    most_rows = max((h.rows for h in day), default=0) or 1
    most_secs = max((h.longest for h in day), default=0.0) or 1.0
    rows_label = short_count(most_rows)
    secs_label = duration(timedelta(seconds=most_secs))
    left = max(MIN_MARGIN, round(label_width(rows_label) + 2 * GAP))
    right = max(MIN_MARGIN, round(label_width(secs_label) + 2 * GAP))
    plot_w, plot_h = WIDTH - left - right, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(day), 1)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="Rows loaded and longest run per hour, last 24 hours" '
        f'xmlns="http://www.w3.org/2000/svg">',
        f'<line class="axis" x1="{left}" y1="{TOP + plot_h}" x2="{left + plot_w}" '
        f'y2="{TOP + plot_h}"/>',
        _label(left - GAP, TOP + 10, rows_label, "end", "rows", f"{count(most_rows)} rows"),
        _label(left - GAP, TOP + plot_h, "0", "end", "rows"),
        _label(left + plot_w + GAP, TOP + 10, secs_label, "start", "secs"),
    ]
    points = []
    for i, hour in enumerate(day):
        x = left + i * slot
        bar = plot_h * hour.rows / most_rows
        tip = f"{hour.start:%H}:00Z: {hour.runs} run(s), {count(hour.rows)} rows loaded" + (
            f", longest {duration(timedelta(seconds=hour.longest))}" if hour.longest else ""
        )
        parts.append(
            f'<rect class="bar" x="{x + 2:.1f}" y="{TOP + plot_h - bar:.1f}" '
            f'width="{max(slot - 4, 1):.1f}" height="{bar:.1f}"><title>{escape(tip)}</title></rect>'
        )
        if hour.longest:
            y = TOP + plot_h - plot_h * hour.longest / most_secs
            points.append((x + slot / 2, y, tip))
        if i % 3 == 0:
            parts.append(_label(x + slot / 2, HEIGHT - 8, f"{hour.start:%H}h", "middle", "hour"))
    if points:
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)
        parts.append(f'<polyline class="line" points="{line}"/>')
        for x, y, tip in points:
            parts.append(
                f'<circle class="dot" cx="{x:.1f}" cy="{y:.1f}" r="3">'
                f"<title>{escape(tip)}</title></circle>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def _label(x: float, y: float, text: str, anchor: str, kind: str, tip: str = "") -> str:
    title = f"<title>{escape(tip)}</title>" if tip else ""
    return (
        f'<text class="label {kind}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">'
        f"{title}{escape(text)}</text>"
    )
