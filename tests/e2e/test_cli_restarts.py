"""`setu jobs wait` and `setu jobs watch` ride a restart of their server,
as the SDK's wait_for_job and watch_job do: one line on stderr when the
server goes away, one when it is back, and the job's end as if nothing had
happened (setu_cli/session.py ServerWatch, setu_client/replicas.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from setu_server.models import JobState
from setu_server.store import jobs
from tests.factories import make_job, make_tenant
from tests.servers import ADMIN_TOKEN, ROOT, free_port, line_of, wait_healthy

GET_JOB = '"method": "/setu.v1.JobOrchestrationService/GetJob"'


@contextlib.asynccontextmanager
async def setu_server(
    database_url: str, port: int, log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A real setu-server on `port` (no cloud workers), its log lines on a pipe."""
    env = os.environ | {
        "SETU_DATABASE_URL": database_url,
        "SETU_LISTEN": f"127.0.0.1:{port}",
        "SETU_HTTP_LISTEN": "127.0.0.1:0",
        "SETU_ADMIN_TOKEN": ADMIN_TOKEN,
        "SETU_GRACE_SECONDS": "1",
        "SETU_WORKER_PROCESSES": "0",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setu_server.main",
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        await wait_healthy(port)
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        rest, _ = await proc.communicate()
        with log.open("ab") as out:
            out.write(rest)


@pytest.mark.parametrize("command", ["wait", "watch"])
async def test_a_waiter_rides_a_server_restart_and_says_so(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path, command: str
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    port = free_port()
    target = f"127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")} | {
        "SETU_SERVER": target,
        "SETU_API_KEY": tenant.api_key,
    }
    said: list[str] = []
    async with setu_server(database_url, port, tmp_path / "first.log") as first:
        assert first.stdout is not None
        cli = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "setu_cli.main",
            "jobs",
            command,
            str(job.id),
            env=env,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert cli.stderr is not None and cli.stdout is not None
        try:
            # The CLI reached the server (its GetJob came first); its wait follows.
            await asyncio.wait_for(line_of(first.stdout, GET_JOB, []), 60)
            first.send_signal(signal.SIGTERM)
            went = await asyncio.wait_for(line_of(cli.stderr, "went away", said), 60)
            assert await first.wait() == 0
        except BaseException:
            cli.kill()
            raise

    async with setu_server(database_url, port, tmp_path / "second.log"):
        back = await asyncio.wait_for(line_of(cli.stderr, "is back", said), 60)
        await jobs.transition_job(pool, job.id, JobState.SUCCEEDED, now=None, message="done")
        out, rest = await asyncio.wait_for(cli.communicate(), 60)

    assert cli.returncode == 0, (said, rest.decode())
    assert went == f"server {target} went away (restarting?); waiting for it…\n"
    assert back == f"server {target} is back\n"
    assert said == [went, back] and rest == b"", "two lines, and nothing else on stderr"
    assert "another replica" not in went, "one address: there is no other replica"
    assert "succeeded" in out.decode()
