"""The runtime loop's slots and stop(), against a TaskSource written for the
test (the seam the loop is built on; no gRPC, no database). Everything runs
under looptime, so the backoff's sleeps and stop's grace cost no real time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from setu_agent.runtime.loop import Runtime
from setu_agent.runtime.task import NonRetryable, TaskContext
from setu_client.errors import Internal, SetuError, Unavailable
from setu_tasks.results import TaskResult, TestResult
from setu_tasks.specs import LeasedTask


def _task(n: int) -> LeasedTask:
    return LeasedTask(
        id=f"task-{n}",
        job_id=f"job-{n}",
        kind="test",
        attempt=1,
        max_attempts=3,
        lease_token=f"token-{n}",
    )


class Source:
    """A TaskSource whose answers the test scripts: each lease call takes the
    next step (an exception to raise, a task to return, or a callable awaited
    for one); once the script is spent, lease calls park until cancelled."""

    def __init__(self, *steps: Any) -> None:
        self._steps = list(steps)
        self.lease_calls = 0
        # max_tasks of each lease call; what completions hand out eagerly.
        self.asked: list[int] = []
        self.upcoming: list[LeasedTask] = []
        self.lease_next: list[bool] = []
        self.heartbeat_errors: list[BaseException] = []
        self.heartbeats = 0
        self.completed: list[str] = []
        self.failed: list[tuple[str, str, bool]] = []
        # (task id, message, checkpoint, outage) of each hand-back.
        self.released: list[tuple[str, str, str, bool]] = []
        self.before_fail: Callable[[], Any] | None = None
        self.before_complete: Callable[[], Any] | None = None
        self._news = asyncio.Event()

    def poke(self) -> None:
        """Something happened: wake whoever waits in until()."""
        self._news.set()

    async def until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            self._news.clear()
            await self._news.wait()

    async def lease(self, wait_seconds: float, max_tasks: int = 1) -> list[LeasedTask]:
        self.lease_calls += 1
        self.asked.append(max_tasks)
        self.poke()
        if not self._steps:
            await asyncio.Event().wait()
        step = self._steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            step = await step()
        return [step] if step is not None else []  # type: ignore[list-item]

    async def heartbeat(self, task: LeasedTask, progress: dict[str, Any]) -> bool:
        self.heartbeats += 1
        self.poke()
        if self.heartbeat_errors:
            raise self.heartbeat_errors.pop(0)
        return False

    async def complete(
        self, task: LeasedTask, result: TaskResult, *, lease_next: bool = False
    ) -> LeasedTask | None:
        if self.before_complete is not None:
            await self.before_complete()
        self.completed.append(task.id)
        self.lease_next.append(lease_next)
        self.poke()
        return self.upcoming.pop(0) if lease_next and self.upcoming else None

    async def fail(self, task: LeasedTask, error: str, retryable: bool) -> None:
        if self.before_fail is not None:
            await self.before_fail()
        self.failed.append((task.id, error, retryable))
        self.poke()

    async def release(
        self, task: LeasedTask, message: str, *, checkpoint: str = "", outage: bool = False
    ) -> None:
        self.released.append((task.id, message, checkpoint, outage))
        self.poke()


async def _ok(context: TaskContext) -> TaskResult:
    return TestResult(ok=True, message="fine")


def _runtime(source: Source, handler: Any = _ok, concurrency: int = 1) -> Runtime:
    return Runtime(
        source,
        {"test": handler},
        name="test runtime",
        concurrency=concurrency,
        lease_ttl_seconds=3.0,
        max_backoff_seconds=2.0,
    )


@pytest.mark.looptime
async def test_internal_and_unknown_lease_answers_back_off_and_the_slot_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A deadlock surfacing as INTERNAL, a proxy's 500 as UNKNOWN: neither may
    # end the slot (it used to, silently, leaving the runtime idle for good).
    caplog.set_level(logging.INFO, logger="setu.runtime")
    source = Source(Internal("deadlock detected"), SetuError("proxy said 500"), _task(1))
    runtime = _runtime(source, concurrency=2)
    running = asyncio.create_task(runtime.run())
    await asyncio.wait_for(source.until(lambda: source.completed == ["task-1"]), timeout=120)
    assert runtime.live_slots == 2, "both slots still work"
    assert "unexpected error; backing off" in caplog.text
    assert "slot started" in caplog.text and "slot ended" not in caplog.text
    await runtime.stop(grace_seconds=1)
    await running
    assert runtime.live_slots == 0


@pytest.mark.looptime
async def test_a_refused_heartbeat_does_not_stop_the_heartbeats() -> None:
    source = Source(_task(1))
    source.heartbeat_errors = [Internal("the database hiccuped")]

    async def beaten_twice(context: TaskContext) -> TaskResult:
        # Ends only once a heartbeat came after the refused one.
        await source.until(lambda: source.heartbeats >= 2)
        return TestResult(ok=True, message="fine")

    runtime = _runtime(source, beaten_twice)
    running = asyncio.create_task(runtime.run())
    await asyncio.wait_for(source.until(lambda: source.completed == ["task-1"]), timeout=60)
    await runtime.stop(grace_seconds=1)
    await running


@pytest.mark.looptime
async def test_a_task_leased_while_stopping_is_handed_back_and_stop_keeps_its_grace() -> None:
    loop = asyncio.get_running_loop()
    stop_began = asyncio.Event()
    started: list[str] = []

    async def leased_late() -> LeasedTask:
        # The lease call is held open until stop() cancels it; the server's
        # answer crosses the cancel (it had leased the task already).
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stop_began.set()
        return _task(2)

    async def runs_forever(context: TaskContext) -> TaskResult:
        started.append(context.task.id)
        source.poke()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    source = Source(_task(1), leased_late)
    runtime = _runtime(source, runs_forever, concurrency=2)
    running = asyncio.create_task(runtime.run())
    await source.until(lambda: started == ["task-1"] and source.lease_calls == 2)

    began = loop.time()
    stopping = asyncio.create_task(runtime.stop(grace_seconds=1))
    await asyncio.wait_for(stop_began.wait(), timeout=30)  # it leases nothing more
    await asyncio.wait_for(stopping, timeout=30)
    assert loop.time() - began <= 1.01, "stop(grace=1) returns within its grace"
    assert started == ["task-1"], "the late lease never started"
    assert source.failed == [], "a drain is not a failure"
    assert ("task-2", "test runtime stopping", "before it started", False) in source.released
    assert ("task-1", "test runtime stopping", "as it started", False) in source.released
    await running


@pytest.mark.looptime
async def test_a_completion_in_flight_when_the_grace_runs_out_is_delivered() -> None:
    source = Source(_task(1))
    reporting = asyncio.Event()
    release = asyncio.Event()

    async def held() -> None:
        reporting.set()
        await release.wait()

    source.before_complete = held
    runtime = _runtime(source)
    running = asyncio.create_task(runtime.run())
    await reporting.wait()
    stopping = asyncio.create_task(runtime.stop(grace_seconds=1))
    await asyncio.sleep(5)  # loop time: the grace has long run out
    release.set()
    await asyncio.wait_for(stopping, timeout=30)
    await running
    assert source.completed == ["task-1"], "the report was not cut short"
    assert source.failed == [], "a delivered result is not also handed back"


@pytest.mark.looptime
@pytest.mark.parametrize("server", ["holds the report", "is unreachable"])
async def test_a_completion_still_in_flight_after_the_report_grace_is_given_up(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Held for good, or retried for good: stop() must end all the same, and
    # send nothing more for the task, whose lease then runs out (the reaper
    # requeues it elsewhere) rather than block the process's exit.
    source = Source(_task(1))
    reporting = asyncio.Event()

    async def held() -> None:
        reporting.set()
        if server == "is unreachable":
            raise Unavailable("connection refused")
        await asyncio.Event().wait()

    source.before_complete = held
    runtime = Runtime(
        source,
        {"test": _ok},
        name="test runtime",
        lease_ttl_seconds=3.0,
        max_backoff_seconds=2.0,
        report_grace_seconds=5,
    )
    running = asyncio.create_task(runtime.run())
    await reporting.wait()
    # Not wait_for: cancelling a stop() stuck on a report would hang too.
    stopped, _ = await asyncio.wait(
        {asyncio.create_task(runtime.stop(grace_seconds=1))}, timeout=60
    )
    assert stopped, "stop() returned"
    await asyncio.wait_for(running, timeout=1)
    assert source.completed == [] and source.failed == [], "nothing more sent for it"
    beats = source.heartbeats
    await asyncio.sleep(30)  # loop time: many a heartbeat interval
    assert source.heartbeats == beats, "its lease is left to run out"
    assert "reports not delivered within the report grace" in caplog.text


@pytest.mark.looptime
async def test_the_runtime_asks_for_as_many_tasks_as_it_has_free_slots() -> None:
    hold = asyncio.Event()

    async def held(context: TaskContext) -> TaskResult:
        await hold.wait()
        return TestResult(ok=True, message="fine")

    source = Source(_task(1))
    runtime = _runtime(source, held, concurrency=3)
    running = asyncio.create_task(runtime.run())
    await source.until(lambda: source.lease_calls == 2)
    assert source.asked == [3, 2], "three idle slots, then two while task-1 runs"
    hold.set()
    await asyncio.wait_for(source.until(lambda: source.completed == ["task-1"]), timeout=60)
    await runtime.stop(grace_seconds=1)
    await running


@pytest.mark.looptime
async def test_a_completion_hands_the_slot_its_next_task_without_a_lease_call() -> None:
    calls_at_start: dict[str, int] = {}

    async def counting(context: TaskContext) -> TaskResult:
        calls_at_start[context.task.id] = source.lease_calls
        return TestResult(ok=True, message="fine")

    source = Source(_task(1))
    source.upcoming = [_task(2)]
    runtime = _runtime(source, counting)
    running = asyncio.create_task(runtime.run())
    await asyncio.wait_for(
        source.until(lambda: source.completed == ["task-1", "task-2"]), timeout=60
    )
    assert calls_at_start == {"task-1": 1, "task-2": 1}, "task-2 came in task-1's answer"
    assert source.lease_next == [True, True]
    await runtime.stop(grace_seconds=1)
    await running
    assert source.failed == []


@pytest.mark.looptime
async def test_a_task_handed_out_eagerly_while_stopping_is_handed_back() -> None:
    source = Source(_task(1))
    source.upcoming = [_task(2)]
    release = asyncio.Event()
    reporting = asyncio.Event()

    async def held() -> None:
        reporting.set()
        await release.wait()

    source.before_complete = held
    runtime = _runtime(source)
    running = asyncio.create_task(runtime.run())
    await reporting.wait()
    stopping = asyncio.create_task(runtime.stop(grace_seconds=1))
    await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(stopping, timeout=30)
    await running
    assert source.completed == ["task-1"] and source.lease_next == [True]
    assert source.released == [("task-2", "test runtime stopping", "before it started", False)]


@pytest.mark.looptime
async def test_a_failure_report_in_flight_when_the_grace_runs_out_is_delivered() -> None:
    # Cut off, the report would never land: the lease would lapse and the
    # reaper would run a permanent failure again elsewhere.
    reporting = asyncio.Event()
    release = asyncio.Event()

    async def fails_for_good(context: TaskContext) -> TaskResult:
        raise NonRetryable("the spec names no such stream")

    async def held() -> None:
        reporting.set()
        await release.wait()

    source = Source(_task(1))
    source.before_fail = held
    runtime = _runtime(source, fails_for_good)
    running = asyncio.create_task(runtime.run())
    await reporting.wait()
    stopping = asyncio.create_task(runtime.stop(grace_seconds=1))
    await asyncio.sleep(5)  # loop time: the grace has long run out
    release.set()
    await asyncio.wait_for(stopping, timeout=30)
    await running
    assert source.failed == [("task-1", "the spec names no such stream", False)]
    assert source.released == [], "a reported failure is not also handed back"


class _Outage(Exception):
    outage = True
    plain_message = True


@pytest.mark.looptime
async def test_a_database_outage_hands_the_task_back_instead_of_failing_it() -> None:
    async def loses_its_database(context: TaskContext) -> TaskResult:
        context.checkpoint = "extract of events, part 3"
        raise _Outage("postgres: connection refused")

    source = Source(_task(1))
    runtime = _runtime(source, loses_its_database)
    running = asyncio.create_task(runtime.run())
    await asyncio.wait_for(source.until(lambda: bool(source.released)), timeout=60)
    await runtime.stop(grace_seconds=1)
    await running
    assert source.released == [
        ("task-1", "postgres: connection refused", "extract of events, part 3", True)
    ]
    assert source.failed == [], "an outage spends no attempt"
    assert runtime.reported["released"] == 1
