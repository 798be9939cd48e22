"""Wake-ups for parked LeaseTask calls, one channel per runtime.

Fed by `setu_task` notifications (payload: the runtime whose queue gained an
eligible task). Every parked lessee of that runtime wakes and tries to lease;
SKIP LOCKED decides who wins, the rest park again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class RuntimeSignal:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.listeners = 0

    def fire(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    def armed(self) -> asyncio.Event:
        """The event the next fire() sets: take it before looking for work, so a
        task that arrives between the look and the wait is not missed."""
        return self._event


class TaskSignals:
    def __init__(self) -> None:
        self._signals: dict[str, RuntimeSignal] = {}
        self.closing = asyncio.Event()

    @contextlib.contextmanager
    def listen(self, runtime: str) -> Iterator[RuntimeSignal]:
        signal = self._signals.get(runtime)
        if signal is None:
            signal = self._signals[runtime] = RuntimeSignal()
        signal.listeners += 1
        try:
            yield signal
        finally:
            signal.listeners -= 1
            if signal.listeners == 0:
                del self._signals[runtime]

    def notified(self, runtime: str) -> None:
        signal = self._signals.get(runtime)
        if signal is not None:
            signal.fire()

    def wake_all(self) -> None:
        for signal in self._signals.values():
            signal.fire()

    def close(self) -> None:
        """Parked lessees answer empty at once."""
        self.closing.set()
        self.wake_all()
