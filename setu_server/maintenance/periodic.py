"""The one shape of every background loop (River's maintenance services).

A service does one pass in `run_once()`, which returns a typed result that
tests read; `run()` repeats it every interval until stopped. A failing pass
is logged and tried again at the next interval: a loop never dies of one.
Tests call `run_once()` directly, or start the loop and wait on the `ran`
hook, never on a sleep.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from typing import ClassVar, Generic, TypeVar

from setu_server.hooks import Hooks

log = logging.getLogger(__name__)

R = TypeVar("R")


class PeriodicService(abc.ABC, Generic[R]):
    # Names the task and the log lines.
    name: ClassVar[str]

    def __init__(self, interval_seconds: float) -> None:
        self.interval_seconds = interval_seconds
        # `ran` fires with each pass's result, `failed` with the error of a
        # pass that raised.
        self.hooks: Hooks[R] = Hooks("ran")
        self.failures: Hooks[BaseException] = Hooks("failed")
        self._task: asyncio.Task[None] | None = None

    @abc.abstractmethod
    async def run_once(self) -> R:
        """One pass; what it did."""

    async def run(self) -> None:
        while True:
            try:
                result = await self.run_once()
            except Exception as exc:
                log.exception("%s pass failed; trying again next interval", self.name)
                await self.failures.failed(exc)
            else:
                await self.hooks.ran(result)
            await asyncio.sleep(self.interval_seconds)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"setu-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
