"""Holding a loading process at a pause point (setu_engine/support/testpoints.py)
from a test, without sleeping: the process writes to a FIFO the test reads
(through the event loop, with a bound so a failure cannot hang the suite),
then waits for the line the test writes to let it go on.

The test holds both FIFOs open read-write (never blocking, never at
end-of-file), so the process's opens return at once."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from setu_engine.support import testpoints


class PausePoint:
    def __init__(self, folder: Path, point: str) -> None:
        self.folder = folder
        self.point = point
        self._fds: list[int] = []
        self._reader: asyncio.StreamReader | None = None
        self._transport: asyncio.ReadTransport | None = None

    @property
    def setting(self) -> str:
        """SETU_TEST_PAUSE for the process to hold."""
        return testpoints.setting(self.point, self.folder)

    async def arm(self) -> None:
        """From now on a process that reaches the point pauses there."""
        testpoints.make_fifos(self.folder)
        reached = os.open(self.folder / "reached", os.O_RDWR | os.O_NONBLOCK)
        resume = os.open(self.folder / "resume", os.O_RDWR | os.O_NONBLOCK)
        self._fds = [reached, resume]
        reader = asyncio.StreamReader()
        pipe = os.fdopen(reached, "rb", buffering=0, closefd=False)
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        self._reader = reader

    async def reached(self, within: float = 120.0) -> None:
        """Returns once a process waits at the point."""
        assert self._reader is not None, "arm() first"
        async with asyncio.timeout(within):
            line = await self._reader.readline()
        assert line.decode().strip() == self.point

    def resume(self) -> None:
        """Lets the waiting process go on."""
        os.write(self._fds[1], b"go\n")

    def disarm(self) -> None:
        """Processes that reach the point from now on go straight on."""
        for name in ("reached", "resume"):
            (self.folder / name).unlink(missing_ok=True)

    def close(self) -> None:
        self.disarm()
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        for fd in self._fds:
            os.close(fd)
        self._fds = []


@asynccontextmanager
async def pause_point(folder: Path, point: str) -> AsyncIterator[PausePoint]:
    """A pause point, not armed yet; closed (and disarmed) on exit."""
    paused = PausePoint(folder, point)
    try:
        yield paused
    finally:
        paused.close()
