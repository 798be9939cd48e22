"""The runtime's backoff on transient errors: it grows, it is capped, and it
starts small again after a good answer. A Runtime leases from a TaskSource
the test scripts, under looptime; the jitter is pinned to its ceiling, so
each delay is exactly the ceiling the backoff allows."""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import grpc
import pytest

from setu_agent.runtime.loop import DATABASE_PAUSE_SECONDS, Runtime, backoff
from setu_client.errors import DatabaseUnavailable, Unavailable, from_status, status_of
from setu_tasks.results import TaskResult
from setu_tasks.specs import LeasedTask

# backoff(): 0.5 s doubling per failure; the Runtime's cap below.
FIRST = 0.5
CAP = 4.0


class Source:
    """Each lease call takes the next scripted answer (an exception to raise,
    or None: nothing to lease) and records when it came; then it parks."""

    def __init__(self, *answers: BaseException | None) -> None:
        self._answers = list(answers)
        self.calls: list[float] = []
        self.spent = asyncio.Event()

    async def lease(self, wait_seconds: float, max_tasks: int = 1) -> list[LeasedTask]:
        self.calls.append(asyncio.get_running_loop().time())
        if not self._answers:
            self.spent.set()
            await asyncio.Event().wait()
        answer = self._answers.pop(0)
        if answer is not None:
            raise answer
        return []

    async def heartbeat(self, task: LeasedTask, progress: dict[str, Any]) -> bool:
        raise AssertionError("nothing is leased")

    async def complete(
        self, task: LeasedTask, result: TaskResult, *, lease_next: bool = False
    ) -> LeasedTask | None:
        raise AssertionError("nothing is leased")

    async def fail(self, task: LeasedTask, error: str, retryable: bool) -> None:
        raise AssertionError("nothing is leased")

    async def release(
        self, task: LeasedTask, message: str, *, checkpoint: str = "", outage: bool = False
    ) -> None:
        raise AssertionError("nothing is leased")


@pytest.mark.looptime
async def test_the_backoff_grows_is_capped_and_starts_small_after_a_good_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(random, "uniform", lambda low, high: high)
    down = Unavailable("server unreachable")
    source = Source(down, down, down, down, down, down, None, down, down)
    runtime = Runtime(source, {}, name="test", concurrency=1, max_backoff_seconds=CAP)
    running = asyncio.create_task(runtime.run())
    await source.spent.wait()
    await runtime.stop(grace_seconds=0)
    await running

    gaps = [round(b - a, 6) for a, b in zip(source.calls, source.calls[1:], strict=False)]
    assert gaps == [
        FIRST,
        2 * FIRST,
        4 * FIRST,
        CAP,  # 8 * FIRST, capped
        CAP,
        CAP,  # the sixth failure: the next call answers "nothing to lease"
        0.0,  # a good answer: ask again at once...
        FIRST,  # ...and the next failure backs off from the start again
        2 * FIRST,
    ]


@pytest.mark.looptime
async def test_by_default_the_backoff_is_capped_at_30_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # setu-agent builds its Runtime without a cap of its own: this default is
    # how long an agent may stay deaf to a server that came back.
    monkeypatch.setattr(random, "uniform", lambda low, high: high)
    down = Unavailable("server unreachable")
    source = Source(*[down] * 9)
    runtime = Runtime(source, {}, name="test", concurrency=1)
    running = asyncio.create_task(runtime.run())
    await source.spent.wait()
    await runtime.stop(grace_seconds=0)
    await running

    gaps = [round(b - a, 6) for a, b in zip(source.calls, source.calls[1:], strict=False)]
    assert gaps == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


@pytest.mark.looptime
async def test_by_default_the_agents_check_in_backs_off_up_to_30_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # setu-agent checks in through backoff() with its defaults (setu_agent/main.py).
    monkeypatch.setattr(random, "uniform", lambda low, high: high)
    loop = asyncio.get_running_loop()
    calls: list[float] = []
    async for attempt in backoff(who="setu-agent"):
        with attempt:
            calls.append(loop.time())
            if len(calls) < 10:
                raise Unavailable("server unreachable")
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(calls)]
    assert gaps == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


@pytest.mark.looptime
async def test_while_the_servers_database_is_down_the_pauses_stay_within_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The server is up, its database is not (a 30 s outage): a backoff grown
    # to 30 s would leave a run submitted as the database returns waiting for
    # the rest of it. Each pause stays within DATABASE_PAUSE_SECONDS; when the
    # server itself is unreachable again, the backoff grows as before.
    monkeypatch.setattr(random, "uniform", lambda low, high: high)
    database_down = DatabaseUnavailable("the database is unreachable; try again shortly")
    down = Unavailable("server unreachable")
    source = Source(*[database_down] * 40, None, down, down, down)
    runtime = Runtime(source, {}, name="test", concurrency=1)
    running = asyncio.create_task(runtime.run())
    await source.spent.wait()
    await runtime.stop(grace_seconds=0)
    await running

    gaps = [round(b - a, 6) for a, b in itertools.pairwise(source.calls)]
    outage, after = gaps[:40], gaps[40:]
    assert outage[:2] == [FIRST, DATABASE_PAUSE_SECONDS]
    assert max(outage) == DATABASE_PAUSE_SECONDS, "never longer, however long the outage"
    assert after == [0.0, FIRST, 2 * FIRST, 4 * FIRST]


def test_a_database_outage_crosses_the_wire_as_its_own_reason() -> None:
    # The server's store raises it (setu_server/store/db.py); the runtime
    # sees it again only if the trailer brings the class back.
    code, details, trailers = status_of(DatabaseUnavailable("the database is unreachable"))
    back = from_status(code, details, dict(trailers))
    assert type(back) is DatabaseUnavailable and code is grpc.StatusCode.UNAVAILABLE
