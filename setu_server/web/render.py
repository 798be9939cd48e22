"""Templates and the filters they use: times, durations, counts, states."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

STATIC = Path(__file__).parent / "static"

ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("setu_server.web", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def when(value: datetime | None) -> str:
    """A time as people read it in a table: UTC, to the second."""
    return value.strftime("%Y-%m-%d %H:%M:%S") + "Z" if value else "—"


def duration(value: timedelta | None) -> str:
    if value is None:
        return "—"
    seconds = max(int(value.total_seconds()), 0)
    if seconds < 60:
        return f"{value.total_seconds():.1f} s" if seconds < 10 else f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def ago(value: datetime | None, now: datetime) -> str:
    if value is None:
        return "never"
    return f"{duration(now - value)} ago"


def count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def rate(value: float) -> str:
    """Rows per second: whole rows from ten up, a decimal below."""
    return f"{value:,.0f} rows/s" if value >= 10 else f"{value:.1f} rows/s"


ENV.filters.update(when=when, duration=duration, count=count, rate=rate)


def static(name: str) -> str:
    """A static file's URL, versioned by its content so browsers never run stale script."""
    version = hashlib.sha256((STATIC / name).read_bytes()).hexdigest()[:12]
    return f"/static/{name}?v={version}"


ENV.globals.update(ago=ago, static=static)


def render(name: str, context: dict[str, Any], status: int = 200) -> web.Response:
    html = ENV.get_template(name).render(**context)
    response = web.Response(text=html, content_type="text/html", status=status)
    # Pages name other pages only; nothing is framed, sniffed or fetched off-site.
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def fragment(name: str, context: dict[str, Any]) -> str:
    """A part of a page, as the live streams send it."""
    return ENV.get_template(name).render(**context)
