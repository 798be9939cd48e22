"""setu-server's cloud workers: processes of their own, started next to the
server and started again when one dies.

Cloud connections are tenants' code paths, so they never run inside the
process that holds the control plane's database URL, admin token and
environment. A worker is `setu-worker` (setu_agent/cloud/main.py): it leases
`cloud` tasks over gRPC like an agent and holds only what it is given here:
its token, the cloud secrets file, the staging blob's credentials and the
reach settings. Everything else in the server's environment (PG*, AWS_*,
cloud provider variables, SETU_DATABASE_URL) stays behind.

In production workers may run apart from servers (`SETU_WORKER_PROCESSES=0`
here, `setu-worker` elsewhere with the same SETU_WORKER_TOKEN).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from setu_agent.cloud import main as worker_main
from setu_engine.support.secrets import ENV_PREFIX

log = logging.getLogger("setu.supervisor")

# What a worker inherits of the server's environment: enough to run Python.
INHERITED = (
    *("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV"),
    # A test's pause point (setu_engine/support/testpoints.py): inert unless set.
    "SETU_TEST_PAUSE",
    # The operator's limit on one MySQL packet (setu_engine/providers/mysql/wire.py).
    "SETU_MYSQL_MAX_PACKET_BYTES",
)
# A worker that died this soon after starting waits before the next start,
# doubling up to the cap, so a worker that cannot start does not spin.
STEADY_SECONDS = 30.0
FIRST_RESTART_SECONDS = 0.5
MAX_RESTART_SECONDS = 30.0

# setu-worker, named through its imported module rather than a string: a
# rename fails here, at import, not at every start of a worker. `python -m`
# with this interpreter needs no console script on PATH, so it runs the same
# from an installed venv, an editable one or a checkout the tests run in.
WORKER_COMMAND = (sys.executable, "-m", worker_main.__name__)


def shared_secret_variables(shared: str, parent: Mapping[str, str]) -> dict[str, str]:
    """The `SETU_SECRET_<NAME>` variables of the server for the names it
    shares with every workspace (SETU_SHARED_SECRETS): a shared secret may be
    given either way, a top-level secrets-file entry or this variable. Only
    the shared names: a worker looks up nothing else outside a workspace's
    section of the file, so it holds nothing else."""
    names = {name.strip() for name in shared.split(",") if name.strip()}
    return {
        f"{ENV_PREFIX}{name}": parent[f"{ENV_PREFIX}{name}"]
        for name in sorted(names)
        if f"{ENV_PREFIX}{name}" in parent
    }


def worker_environment(settings: Mapping[str, str], parent: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of a worker: the inherited basics and the
    worker's own SETU_* settings, nothing else."""
    env = {name: parent[name] for name in INHERITED if name in parent}
    env |= {name: value for name, value in settings.items() if value != ""}
    return env


@dataclass
class WorkerSupervisor:
    """Keeps `count` worker processes running until `stop()`."""

    count: int
    env: dict[str, str]
    command: list[str] = field(default_factory=lambda: list(WORKER_COMMAND))
    processes: dict[int, asyncio.subprocess.Process] = field(default_factory=dict)
    started: int = 0
    failed_starts: int = 0
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _slots: list[asyncio.Task[None]] = field(default_factory=list)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    def start(self) -> None:
        self._slots = [
            asyncio.create_task(self._keep(slot), name=f"setu-worker-{slot}")
            for slot in range(self.count)
        ]

    async def _keep(self, slot: int) -> None:
        delay = FIRST_RESTART_SECONDS
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            began = loop.time()
            try:
                # The worker's stdin is a pipe from this process: when the
                # server dies, even by SIGKILL, the worker reads EOF and exits.
                process = await asyncio.create_subprocess_exec(
                    *self.command, env=self.env, stdin=asyncio.subprocess.PIPE
                )
            except OSError as exc:
                # A start that fails (no such program, no memory) is tried
                # again like a worker that died: the slot never ends.
                async with self._changed:
                    self.failed_starts += 1
                    self._changed.notify_all()
                log.error(
                    "cloud worker could not start; trying again",
                    extra={"slot": slot, "error": str(exc), "in_seconds": delay},
                )
            else:
                async with self._changed:
                    self.processes[slot] = process
                    self.started += 1
                    self._changed.notify_all()
                log.info("cloud worker started", extra={"slot": slot, "pid": process.pid})
                code = await process.wait()
                if self._stopping.is_set():
                    return
                if loop.time() - began >= STEADY_SECONDS:
                    delay = FIRST_RESTART_SECONDS
                log.warning(
                    "cloud worker exited; starting another",
                    extra={"slot": slot, "pid": process.pid, "code": code, "in_seconds": delay},
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stopping.wait()
            delay = min(delay * 2, MAX_RESTART_SECONDS)

    async def process(
        self, slot: int = 0, other_than: asyncio.subprocess.Process | None = None
    ) -> asyncio.subprocess.Process:
        """The worker process of `slot`, once started (and not `other_than`:
        the one that replaced it)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.processes.get(slot) not in (None, other_than))
            return self.processes[slot]

    async def stop(self, grace: float) -> None:
        """SIGTERM every worker (they hand running tasks back), then SIGKILL
        what is left after `grace` seconds."""
        self._stopping.set()
        running = [p for p in self.processes.values() if p.returncode is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        for process in running:
            try:
                async with asyncio.timeout(grace + 5.0):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        for task in self._slots:
            task.cancel()
        await asyncio.gather(*self._slots, return_exceptions=True)
