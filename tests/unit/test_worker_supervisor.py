"""The supervisor keeps its worker slots filled: a worker that exits is
started again, and a start that fails is tried again rather than ending
the slot (setu_server/worker/supervisor.py). The "workers" here are tiny
real processes."""

from __future__ import annotations

import subprocess
import sys

from setu_server.worker.supervisor import WorkerSupervisor, worker_environment

QUIT_AT_ONCE = [sys.executable, "-c", "pass"]


async def test_a_worker_that_exits_is_started_again() -> None:
    supervisor = WorkerSupervisor(1, {}, command=QUIT_AT_ONCE)
    supervisor.start()
    try:
        first = await supervisor.process()
        second = await supervisor.process(other_than=first)
        assert first.pid != second.pid and supervisor.started >= 2
    finally:
        await supervisor.stop(grace=1)


async def test_a_start_that_fails_is_tried_again_and_the_slot_lives_on() -> None:
    supervisor = WorkerSupervisor(1, {}, command=["/nonexistent/setu-worker"])
    supervisor.start()
    try:
        async with supervisor._changed:
            await supervisor._changed.wait_for(lambda: supervisor.failed_starts > 0)
        assert supervisor.started == 0
        supervisor.command = [sys.executable, "-c", "import sys; sys.stdin.read()"]
        started = await supervisor.process()
        assert started.returncode is None
    finally:
        await supervisor.stop(grace=1)


def test_a_worker_inherits_only_the_basics_and_its_own_settings() -> None:
    parent = {"PATH": "/bin", "PGPASSWORD": "x", "AWS_SECRET_ACCESS_KEY": "y", "LANG": "C"}
    env = worker_environment({"SETU_SERVER": "h:1", "SETU_TLS": ""}, parent)
    assert env == {"PATH": "/bin", "LANG": "C", "SETU_SERVER": "h:1"}


def test_the_default_command_is_the_setu_worker_program() -> None:
    command = WorkerSupervisor(1, {}).command
    shown = subprocess.run([*command, "--help"], capture_output=True, text=True, check=True)
    assert shown.stdout.startswith("usage: setu-worker")
