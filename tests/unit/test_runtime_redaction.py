"""A failure a handler raises reaches the server (and the runtime's log
lines) with every secret the task resolved redacted, whichever way it was
raised; so does the free text of a result it returns.
The Runtime runs against the scripted TaskSource of test_runtime_slots."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from setu_agent.runtime.task import NonRetryable, TaskContext
from setu_engine.errors import ProviderError
from setu_tasks.results import TaskResult, TestResult
from setu_tasks.specs import LeasedTask
from tests.unit.test_runtime_slots import Source, _runtime, _task

SECRET = "hunter2-correct-horse-battery"


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("raised", "retryable"),
    [(RuntimeError, True), (ProviderError, True), (NonRetryable, False)],
)
async def test_a_failure_quoting_a_resolved_secret_is_reported_redacted(
    raised: type[Exception], retryable: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    source = Source(_task(1))

    async def leaky(context: TaskContext) -> TaskResult:
        context.redact.add(SECRET)  # as resolving a connection's secrets does
        raise raised(f"password authentication failed for 'app:{SECRET}@db'")

    runtime = _runtime(source, leaky)
    running = asyncio.create_task(runtime.run())
    await asyncio.wait_for(source.until(lambda: bool(source.failed)), timeout=60)
    await runtime.stop(grace_seconds=1)
    await running

    [(task_id, error, said_retryable)] = source.failed
    assert task_id == "task-1" and said_retryable is retryable
    assert SECRET not in error
    assert "password authentication failed for 'app:***@db'" in error
    # Nor in what the runtime logs (only a DEBUG traceback, asked for, may quote it).
    logged = [vars(r) for r in caplog.records if r.levelno >= logging.INFO]
    assert all(SECRET not in str(r) for r in logged)


class Recording(Source):
    """test_runtime_slots' Source, keeping the results it was sent."""

    def __init__(self, *steps: Any) -> None:
        super().__init__(*steps)
        self.results: list[TaskResult] = []

    async def complete(
        self, task: LeasedTask, result: TaskResult, *, lease_next: bool = False
    ) -> LeasedTask | None:
        self.results.append(result)
        return await super().complete(task, result, lease_next=lease_next)


@pytest.mark.looptime
async def test_a_result_quoting_a_resolved_secret_is_reported_redacted() -> None:
    source = Recording(_task(1))

    async def leaky(context: TaskContext) -> TaskResult:
        context.redact.add(SECRET)
        return TestResult(ok=False, message=f"password authentication failed for {SECRET}")

    runtime = _runtime(source, leaky)
    running = asyncio.create_task(runtime.run())
    await asyncio.wait_for(source.until(lambda: source.completed == ["task-1"]), timeout=60)
    await runtime.stop(grace_seconds=1)
    await running
    said = "password authentication failed for ***"
    assert source.results == [TestResult(ok=False, message=said)]
