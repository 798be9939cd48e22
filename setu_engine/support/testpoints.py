"""Test-only pause points: where a test holds a loading process at an exact
moment (between two staged parts, inside a stream's final apply, just
after its commit) instead of sleeping and hoping.

Inert unless `SETU_TEST_PAUSE=<point>=<folder>` is set and `<folder>`
holds the two FIFOs `reached` and `resume` (see `make_fifos`). A process
that arrives at `<point>` writes the point's name to `reached` (the test
waits to read it), then waits for a line on `resume`. A test that kills
the process there (SIGKILL) then removes the FIFOs, so a process started
after it (a supervisor's restart, the retry's runtime) goes straight on.
tests/pause.py is the test's side.

The cloud worker inherits the variable from its server (setu_server/worker/
supervisor.py); an agent gets it in its own environment.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

ENV = "SETU_TEST_PAUSE"

# The points, as named in SETU_TEST_PAUSE.
# Part `index` (from 0) of an extract read and handed to its upload: the
# source's read is open, mid-stream (setu_engine/staged/staging.py).
EXTRACTED_PART = "extracted-part-{index}"
# The `count`-th part (from 1) an extract read of a stream in this attempt,
# whichever part it resumed at: a test holds each attempt after the same
# amount of work (setu_engine/staged/staging.py).
READ_PART = "read-part-{count}"
STAGED_PART = "staged-part-{index}"  # part `index` (from 0) committed with its marker
APPLY_OPEN = "apply-open"  # the apply's transaction written, not yet committed
APPLIED = "applied"  # the apply committed
# setu-server's stop(), its long-polls answered and closed, before its cloud
# workers stop (which takes as long as their tasks take to hand back).
SERVER_DRAINING = "server-draining"


async def reached(point: str) -> None:
    """Pauses here when a test asked for `point`; returns at once otherwise."""
    wanted = os.environ.get(ENV, "")
    name, _, folder = wanted.partition("=")
    if not folder or name != point:
        return
    # A FIFO's open blocks until the other end opens it: in a thread, so
    # the process's event loop (its heartbeats) runs on meanwhile.
    await asyncio.to_thread(_pause, Path(folder), point)


def _pause(folder: Path, point: str) -> None:
    try:
        # Never created here (O_CREAT): only a FIFO the test made is opened.
        with os.fdopen(os.open(folder / "reached", os.O_WRONLY), "w") as out:
            out.write(point + "\n")
        with (folder / "resume").open() as resume:
            resume.readline()
    except FileNotFoundError:
        return  # not armed, or the test is done with this point


def make_fifos(folder: Path) -> None:
    """The two FIFOs of a pause point, for a test to hold a process with."""
    folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(folder / "reached")
    os.mkfifo(folder / "resume")


def setting(point: str, folder: Path) -> str:
    """The value of SETU_TEST_PAUSE that pauses at `point`."""
    return f"{point}={folder}"
