"""Real setu-server instances for tests: in-process on port 0 (through
setu_server.testing, which ships with the server), or as processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from setu_client.clock import Clock
from setu_server import testing
from setu_server.models import Job
from setu_server.server import Running
from setu_server.service.secrets import TokenKind, new_secret

# One token for every server of the session, in-process or spawned.
ADMIN_TOKEN = new_secret(TokenKind.ADMIN).token

# Tests keep their files in their own tmp folders: cloud connections may
# use any local path here (tests/e2e/test_cloud_policy.py pins the rule).
# Their S3 (moto) listens on loopback, which cloud connections reach only as
# an allowed network (tests/e2e/test_cloud_egress.py pins that rule).
_TEST_DEFAULTS: dict[str, object] = {
    "admin_token": ADMIN_TOKEN,
    "http_listen": "127.0.0.1:0",
    "local_files_root": "/",
    "cloud_allow_networks": "127.0.0.0/8",
}


@contextlib.asynccontextmanager
async def in_process(
    database_url: str, clock: Clock | None = None, **overrides: object
) -> AsyncIterator[Running]:
    async with testing.in_process(database_url, clock, **(_TEST_DEFAULTS | overrides)) as running:
        yield running


def count_waits(server: Running, waits: list[uuid.UUID]) -> None:
    """Adds the job of every WaitJob that reaches `server`'s job service to `waits`."""
    wait = server.jobs.wait

    async def counted(workspace_id: uuid.UUID, job_id: uuid.UUID, max_wait: float) -> Job:
        waits.append(job_id)
        return await wait(workspace_id, job_id, max_wait)

    server.jobs.wait = counted  # type: ignore[method-assign]


@contextlib.asynccontextmanager
async def held_draining(server: Running) -> AsyncIterator[Running]:
    """`server` with its stop() begun and held at its `draining` hook (its
    long-polls closed, its calls still served) until the block ends; then
    the stop goes on, and is awaited."""
    draining, release = asyncio.Event(), asyncio.Event()

    async def hold(_: None) -> None:
        draining.set()
        await release.wait()

    server.hooks.draining = hold
    stopping = asyncio.create_task(server.stop(grace=5))
    await draining.wait()
    try:
        yield server
    finally:
        release.set()
        await stopping


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def tool_process(
    command: list[str], log_path: Path, ready: Callable[[bytes], bool], name: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A server a test needs (nginx, pgbouncer) running `command`, its output
    copied to `log_path`, from the first line `ready` accepts (RuntimeError
    when it exits or 30 s pass first) until the block ends: then SIGTERM,
    SIGKILL if it lingers, and reaped."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started = threading.Event()

    def copy_output() -> None:
        assert proc.stdout is not None
        with log_path.open("ab") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if ready(line):
                    started.set()
        started.set()  # exited: the check below says so

    copier = threading.Thread(target=copy_output, name=f"{name}-log", daemon=True)
    copier.start()
    try:
        if not started.wait(30) or proc.poll() is not None:
            raise RuntimeError(f"{name} did not start; see {log_path}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        copier.join(5)


@contextlib.contextmanager
def server_process(
    env: dict[str, str], log_path: Path, port: int | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A real `setu-server` process; killed (and reaped) on exit."""
    port = port or free_port()
    full_env = (
        os.environ
        | {
            "SETU_LISTEN": f"127.0.0.1:{port}",
            "SETU_HTTP_LISTEN": "127.0.0.1:0",
            "SETU_ADMIN_TOKEN": ADMIN_TOKEN,
            "SETU_GRACE_SECONDS": "1",
            # Tests keep files and database sockets in their own tmp folders.
            "SETU_LOCAL_FILES_ROOT": "/",
            "SETU_CLOUD_ALLOW_NETWORKS": "127.0.0.0/8",
        }
        | env
    )
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "setu_server.main"], env=full_env, stdout=log, stderr=log
        )
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def wait_healthy(port: int, within: float = 30.0) -> None:
    """Until the server answers SERVING; the channel waits for it to come up."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = await stub.Check(
            health_pb2.HealthCheckRequest(), timeout=within, wait_for_ready=True
        )
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def agent_process(
    port: int, token: str, log_path: Path, **env: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A real `setu-agent` process with the test handlers; killed on exit."""
    full_env = (
        os.environ
        | {
            "SETU_SERVER": f"127.0.0.1:{port}",
            "SETU_AGENT_TOKEN": token,
            "SETU_AGENT_EXTRA_HANDLERS": "tests.e2e.agent_handlers:HANDLERS",
            "SETU_GRACE_SECONDS": "1",
        }
        | env
    )
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "setu_agent.main"],
            env=full_env,
            stdout=log,
            stderr=log,
            cwd=ROOT,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def checked_in_agent(
    port: int,
    token: str,
    log_path: Path,
    on_line: Callable[[bytes], None] | None = None,
    **env: str,
) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
    """A real `setu-agent` process, yielded once it has checked in; killed on
    exit. `on_line` hears every line it prints (a test waits on one)."""
    full_env = (
        dict(os.environ)
        | {
            "SETU_SERVER": f"127.0.0.1:{port}",
            "SETU_AGENT_TOKEN": token,
            "SETU_GRACE_SECONDS": "1",
        }
        | env
    )
    return checked_in_runtime("setu_agent.main", full_env, log_path, on_line)


@contextlib.asynccontextmanager
async def checked_in_runtime(
    module: str,
    env: dict[str, str],
    log_path: Path,
    on_line: Callable[[bytes], None] | None = None,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A runtime process (`setu_agent.main`, or `setu_agent.cloud` for a cloud
    worker) with exactly `env`, yielded once it has checked in (its own log
    line says so: read from its output, no polling); killed on exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    checked_in = asyncio.Event()

    async def copy_output() -> None:
        assert proc.stdout is not None
        with log_path.open("ab") as log:
            async for line in proc.stdout:
                log.write(line)
                log.flush()
                if on_line is not None:
                    on_line(line)
                if b"checked in" in line:
                    checked_in.set()

    copying = asyncio.create_task(copy_output())
    try:
        waiting = asyncio.create_task(checked_in.wait())
        await asyncio.wait({waiting, copying}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if not checked_in.is_set():
            waiting.cancel()
            raise AssertionError(f"{module} did not check in; see {log_path}")
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        await copying


async def agent_with_stderr(port: int, token: str, **env: str) -> asyncio.subprocess.Process:
    """A real setu-agent (with the test handlers) whose log lines the test
    reads as they come, with `line_with`; the caller kills it."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setu_agent.main",
        env=os.environ
        | {
            "SETU_SERVER": f"127.0.0.1:{port}",
            "SETU_AGENT_TOKEN": token,
            "SETU_AGENT_EXTRA_HANDLERS": "tests.e2e.agent_handlers:HANDLERS",
        }
        | env,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


async def line_with(
    proc: asyncio.subprocess.Process, text: str, seen: list[str] | None = None
) -> str:
    """The next line of `proc`'s stderr that holds `text` (every line read
    on the way is added to `seen`)."""
    assert proc.stderr is not None
    return await line_of(proc.stderr, text, seen)


async def line_of(stream: asyncio.StreamReader, text: str, seen: list[str] | None = None) -> str:
    """The next line of `stream` that holds `text` (every line read on the
    way is added to `seen`)."""
    while line := (await stream.readline()).decode():
        if seen is not None:
            seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"the process ended without saying {text!r}; it said {seen}")
