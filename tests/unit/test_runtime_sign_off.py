"""stop() signs off as it begins, before its grace, and a sign-off that
fails never keeps the runtime from stopping (under looptime)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from setu_agent.runtime.loop import Runtime
from setu_agent.runtime.task import TaskContext
from setu_client.errors import Unavailable
from setu_tasks.results import TaskResult
from tests.unit.test_runtime_slots import Source, _task


def _runtime(
    source: Source, sign_off: Callable[[str], Awaitable[None]]
) -> tuple[Runtime, list[str]]:
    started: list[str] = []

    async def runs_forever(context: TaskContext) -> TaskResult:
        started.append(context.task.id)
        source.poke()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    runtime = Runtime(
        source,
        {"test": runs_forever},
        name="edge",
        concurrency=1,
        lease_ttl_seconds=30.0,
        sign_off=sign_off,
    )
    return runtime, started


@pytest.mark.looptime
async def test_stop_signs_off_at_once_while_its_tasks_still_run() -> None:
    loop = asyncio.get_running_loop()
    source = Source(_task(1))
    signed: list[tuple[str, float, int]] = []

    async def sign_off(reason: str) -> None:
        signed.append((reason, loop.time(), len(source.released)))

    runtime, started = _runtime(source, sign_off)
    running = asyncio.create_task(runtime.run())
    await source.until(lambda: started == ["task-1"])
    began = loop.time()
    await runtime.stop(grace_seconds=10)
    await running
    assert signed == [("edge is stopping", began, 0)], "once, before the task was handed back"
    assert source.released == [("task-1", "edge stopping", "as it started", False)]


@pytest.mark.looptime
async def test_a_sign_off_the_server_refuses_does_not_keep_the_runtime_running() -> None:
    source = Source()

    async def sign_off(reason: str) -> None:
        raise Unavailable("the server is down")

    runtime, _ = _runtime(source, sign_off)
    running = asyncio.create_task(runtime.run())
    await source.until(lambda: source.lease_calls == 1)
    await asyncio.wait_for(runtime.stop(grace_seconds=1), 5)
    await running
    assert runtime.live_slots == 0
