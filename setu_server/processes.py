"""`setu-server --processes N`: N server processes sharing one port.

CPython runs one core's worth of Python per process, and most of what a call
costs the server is Python (decoding, authentication, validation, the
servicer, encoding), so one process serves at most one core's worth of
calls. This parent starts N children that listen on the same port with
SO_REUSEPORT, and the kernel spreads incoming connections over them. Each
child is a whole server, as a replica behind a load balancer is: its own
database pool, watch hub and LISTEN session, so a transition made through
one wakes a waiter parked on another by NOTIFY, as between replicas.

What the children must agree on is settled here, once: the port (port 0
picks a free one, held here until they stop), the database (an embedded one
is started here), the cloud workers' token and the page-token key (random
ones drawn here when none is configured). Only child 0 runs the cloud
workers and the HTTP listener (run monitor, /metrics): one set of workers
for the server, as with one process, and one monitor address.

Supervision: SIGTERM or SIGINT to the parent drains every child (each stops
as a lone server does) and the parent exits once they all have. A child
that ends before it ever served ends the whole server with its exit code
(bad settings, a port in use: restarting would not help); a child that dies
later is restarted, after a back-off that doubles while it keeps dying. A
child outlives no parent: Linux sends it SIGTERM when the parent dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import os
import secrets
import signal
import socket
import sys
from dataclasses import dataclass, field
from typing import Any

from setu_server.config import Settings
from setu_server.server import database_url

log = logging.getLogger("setu.server.processes")

# What a server prints once it serves (setu_server.server.serve_until_signalled).
READY_LINE = "setu-server listening on port "
RESTART_DELAY_SECONDS = 1.0
MAX_RESTART_DELAY_SECONDS = 30.0
# A child that served this long before dying restarts after the first delay again.
STEADY_SECONDS = 60.0
# Beyond the grace each child gives its calls: its workers' hand-back, its stop.
STOP_MARGIN_SECONDS = 30.0
_PR_SET_PDEATHSIG = 1


@dataclass
class _Child:
    index: int
    served: asyncio.Event = field(default_factory=asyncio.Event)
    proc: asyncio.subprocess.Process | None = None


async def supervise(settings: Settings, argv: list[str]) -> int:
    """Serves with settings.process_count children until signalled; the exit code."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        url = await database_url(settings, stack)
        host, port, held = _reserve(settings.listen)
        if held is not None:
            stack.callback(held.close)
        env = os.environ | {
            "SETU_DATABASE_URL": url,
            "SETU_WORKER_TOKEN": settings.worker_token or secrets.token_urlsafe(32),
            "SETU_PAGE_TOKEN_KEY": settings.page_token_key or secrets.token_urlsafe(32),
        }
        children = [_Child(i) for i in range(settings.process_count)]
        failed: asyncio.Future[int] = loop.create_future()
        keepers = [
            asyncio.create_task(
                _keep(child, _command(argv, host, port, child.index), env, stop, failed)
            )
            for child in children
        ]
        for keeper in keepers:
            keeper.add_done_callback(functools.partial(_keeper_ended, failed))
        try:
            return await _serve(children, port, stop, failed)
        finally:
            stop.set()
            await _stop_all(children, keepers, settings.grace_seconds)


async def _serve(
    children: list[_Child], port: int, stop: asyncio.Event, failed: asyncio.Future[int]
) -> int:
    all_served: asyncio.Future[Any] = asyncio.ensure_future(
        asyncio.gather(*(c.served.wait() for c in children))
    )
    stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    ending: set[asyncio.Future[Any]] = {stopped, failed}
    try:
        await asyncio.wait({all_served, *ending}, return_when=asyncio.FIRST_COMPLETED)
        if all_served.done() and not failed.done():
            pids = " ".join(str(c.proc.pid) for c in children if c.proc is not None)
            print(f"{READY_LINE}{port}", flush=True)
            print(f"setu-server processes: {len(children)} (pids {pids})", flush=True)
            await asyncio.wait(ending, return_when=asyncio.FIRST_COMPLETED)
        if failed.done():
            return failed.result()
        log.info("shutting down", extra={"processes": len(children)})
        return 0
    finally:
        all_served.cancel()
        stopped.cancel()


def _command(argv: list[str], host: str, port: int, index: int) -> list[str]:
    """The child's command line: the parent's, then what it must not differ in
    (flags win over the environment, and a later flag over an earlier one)."""
    command = [sys.executable, "-m", "setu_server.main", *argv]
    command += ["--processes", "1", "--listen", f"{host}:{port}", "--process-index", str(index)]
    if index > 0:
        command += ["--worker-processes", "0", "--http-listen", ""]
    return command


async def _keep(
    child: _Child,
    command: list[str],
    env: dict[str, str],
    stop: asyncio.Event,
    failed: asyncio.Future[int],
) -> None:
    """Runs one child, and again after it dies, until the server stops."""
    loop = asyncio.get_running_loop()
    delay = RESTART_DELAY_SECONDS
    while not stop.is_set():
        proc = await asyncio.create_subprocess_exec(
            *command, env=env, stdout=asyncio.subprocess.PIPE, preexec_fn=_die_with_parent
        )
        child.proc = proc
        started = loop.time()
        assert proc.stdout is not None
        await _relay(proc.stdout, child)
        code = await proc.wait()
        if stop.is_set():
            return
        if not child.served.is_set():
            if not failed.done():
                failed.set_result(code or 1)
            return
        if loop.time() - started > STEADY_SECONDS:
            delay = RESTART_DELAY_SECONDS
        log.warning(
            "server process ended; restarting it",
            extra={
                "process_index": child.index,
                "pid": proc.pid,
                "code": code,
                "delay_seconds": delay,
            },
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        delay = min(delay * 2, MAX_RESTART_DELAY_SECONDS)


def _keeper_ended(failed: asyncio.Future[int], keeper: asyncio.Task[None]) -> None:
    """A keeper that fails stops the server rather than leave its child dead
    and the port served by fewer processes than asked for."""
    if keeper.cancelled() or keeper.exception() is None:
        return
    log.error("server process supervision failed", exc_info=keeper.exception())
    if not failed.done():
        failed.set_result(1)


async def _relay(stdout: asyncio.StreamReader, child: _Child) -> None:
    """The child's stdout on ours, but for its "listening" line: the parent
    prints one for them all once every child serves."""
    async for raw in stdout:
        line = raw.decode(errors="replace")
        if line.startswith(READY_LINE):
            if child.served.is_set():
                log.info(
                    "server process serving again",
                    extra={
                        "process_index": child.index,
                        "pid": child.proc.pid if child.proc else None,
                    },
                )
            child.served.set()
            continue
        sys.stdout.write(line)
        sys.stdout.flush()


async def _stop_all(
    children: list[_Child], keepers: list[asyncio.Task[None]], grace: float
) -> None:
    for child in children:
        if child.proc is not None and child.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
    _, late = await asyncio.wait(keepers, timeout=grace + STOP_MARGIN_SECONDS)
    if late:
        for child in children:
            if child.proc is not None and child.proc.returncode is None:
                log.warning(
                    "server process did not stop; killing it", extra={"process_index": child.index}
                )
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
        await asyncio.wait(late)


def _reserve(listen: str) -> tuple[str, int, socket.socket | None]:
    """(host, port, the socket holding it): port 0 becomes a free port, held
    bound (not listening, so it takes no connection) with SO_REUSEPORT so the
    children may bind it too, and nothing else meanwhile."""
    host, _, port_text = listen.rpartition(":")
    port = int(port_text)
    if port != 0:
        return host, port, None
    family, kind, proto, _, address = socket.getaddrinfo(
        host.strip("[]") or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    held = socket.socket(family, kind, proto)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    held.bind(address)
    return host, int(held.getsockname()[1]), held


def _die_with_parent() -> None:
    """In the child before it runs: SIGTERM when the parent dies (Linux), so a
    killed parent leaves no server holding the port."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
