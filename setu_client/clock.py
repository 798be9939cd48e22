"""Injected time. Nothing else in Setu reads wall time.

Wall time (`now`) is for timestamps we store or show; waiting, caps and
timeouts use the event loop's clock (`asyncio.sleep`, `loop.time()`), so tests
under a fast-forwarded loop clock cover long waits in milliseconds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Current wall time, timezone-aware UTC."""
        ...

    def sql_now(self) -> datetime | None:
        """The "now" to pass to SQL: None lets PostgreSQL decide, so every
        replica agrees on one clock; a fake clock passes its own time."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sql_now(self) -> datetime | None:
        return None


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def sql_now(self) -> datetime | None:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
