"""The fallback while notifications do not arrive: every `interval_seconds`
(SETU_LISTEN_FALLBACK_SECONDS, 1 s) the watched jobs are re-checked and the
parked LeaseTask calls look for work again, instead of waiting for the slow
re-check (30 s) and the lease poll (10 s).

The listener's probe decides (store/listener.py): when its session stops
delivering, this loop starts and says so at WARNING, once, naming the fix;
when the probe arrives again, it says so at INFO, re-checks once more and
stops. A waiter is then woken within about the interval of its job's end
rather than within a notification's few milliseconds; a pass costs one
query per 1,000 watched jobs (only the changed ones come back) and one lease
query per parked runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from setu_server.config import FallbackSettings
from setu_server.maintenance.periodic import PeriodicService
from setu_server.service.signals import TaskSignals
from setu_server.service.watch import WatchHub

log = logging.getLogger(__name__)

FIX = (
    "set SETU_LISTEN_DATABASE_URL to PostgreSQL itself (or a session-mode pooler) "
    "so that LISTEN holds a session of its own"
)


@dataclass(frozen=True)
class FallbackPass:
    watched: int


class ListenFallback(PeriodicService[FallbackPass]):
    name = "listen-fallback"

    def __init__(
        self, hub: WatchHub, signals: TaskSignals, settings: FallbackSettings | None = None
    ) -> None:
        self.settings = settings or FallbackSettings()
        super().__init__(self.settings.interval_seconds)
        self._hub = hub
        self._signals = signals
        self.active = False
        # One re-check when notifications come back: what ended in between.
        self._last: asyncio.Task[None] | None = None

    async def run_once(self) -> FallbackPass:
        self._signals.wake_all()
        watched = self._hub.watched
        await self._hub.run_once()
        return FallbackPass(watched)

    def listen_health(self, healthy: bool, why: str) -> None:
        """The listener's verdict changed (store/listener.py `on_health`)."""
        if not healthy and not self.active:
            self.active = True
            log.warning(
                "notifications do not arrive on the LISTEN connection (%s): waits and "
                "leases are re-checked every %g s instead; %s",
                why,
                self.interval_seconds,
                FIX,
                extra={"reason": why, "fallback_seconds": self.interval_seconds},
            )
            self.start()
        elif healthy and self.active:
            self.active = False
            log.info("notifications arrive on the LISTEN connection again; fallback re-checks off")
            looping, self._task = self._task, None
            self._last = asyncio.create_task(
                self._last_pass(looping), name="setu-listen-fallback-last"
            )

    async def _last_pass(self, looping: asyncio.Task[None] | None) -> None:
        """The loop stopped (and awaited), then one more re-check; a failure
        is logged like a loop's pass, never left in the task unretrieved."""
        if looping is not None:
            looping.cancel()
            await asyncio.gather(looping, return_exceptions=True)
        try:
            await self.run_once()
        except Exception:
            log.exception("%s last pass failed", self.name)

    async def stop(self) -> None:
        await super().stop()
        last, self._last = self._last, None
        if last is not None:
            last.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await last
