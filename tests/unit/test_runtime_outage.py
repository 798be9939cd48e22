"""The runtime says an outage once: the first failed call at WARNING with the
address and the cause, the retries quietly, and `reconnected to X after N s`
when an answer comes back. A task's database outage is handed back for free,
but a refused first connect outside an outage streak spends an attempt. A
scripted TaskSource (tests/unit/test_runtime_slots.py) under looptime, so the
backoff costs no real time."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from setu_agent.runtime.loop import Runtime
from setu_agent.runtime.task import TaskContext
from setu_client.diagnose import Outage
from setu_client.errors import SetuError, Unavailable
from setu_engine.errors import OutageError
from setu_tasks.results import TaskResult
from tests.unit.test_runtime_slots import Source, _ok, _task

REFUSED = Unavailable(
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:9: "
    "Failed to connect to remote host: Connection refused"
)


async def _run_until_completed(source: Source, outage: Outage) -> None:
    runtime = Runtime(
        source,
        {"test": _ok},
        name="test runtime",
        concurrency=1,
        max_backoff_seconds=2.0,
        server_outage=outage,
    )
    running = asyncio.create_task(runtime.run())
    await asyncio.wait_for(source.until(lambda: source.completed == ["task-1"]), timeout=120)
    await runtime.stop(grace_seconds=1)
    await running


@pytest.mark.looptime
async def test_an_outage_is_one_warning_with_its_cause_then_reconnected(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="setu.runtime")
    source = Source(REFUSED, REFUSED, REFUSED, REFUSED, _task(1))
    await _run_until_completed(source, Outage("edge.example:50051"))

    records = [r for r in caplog.records if "edge.example:50051" in r.getMessage()]
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert warnings == [
        "cannot reach edge.example:50051: connection refused: nothing listens on that port; "
        "backing off"
    ]
    assert sum(r.levelno == logging.DEBUG for r in records) == 3, "the retries, quietly"
    (reconnected,) = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert reconnected.startswith("reconnected to edge.example:50051 after ")
    assert "server unreachable" not in caplog.text


@pytest.mark.looptime
async def test_a_proxy_answer_grpc_calls_unknown_is_an_outage_not_an_unexpected_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="setu.runtime")
    proxy_500 = SetuError("Received http2 header with status: 500")
    source = Source(proxy_500, proxy_500, _task(1))
    await _run_until_completed(source, Outage("edge.example:50051"))

    assert "unexpected error" not in caplog.text
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "cannot reach edge.example:50051: a proxy or load balancer in between answered "
        "HTTP 500; backing off"
    ]


@pytest.mark.looptime
async def test_a_lease_answered_empty_ends_the_outage(caplog: pytest.LogCaptureFixture) -> None:
    # An idle agent hears the server again through a lease with nothing in it.
    caplog.set_level(logging.INFO, logger="setu.runtime")

    async def nothing() -> None:
        return None

    source = Source(REFUSED, REFUSED, nothing)
    runtime = Runtime(
        source, {"test": _ok}, name="test runtime", concurrency=1, server_outage=Outage("edge:1")
    )
    running = asyncio.create_task(runtime.run())
    await asyncio.wait_for(source.until(lambda: source.lease_calls == 4), timeout=120)
    await runtime.stop(grace_seconds=1)
    await running
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(m.startswith("reconnected to edge:1 after ") for m in infos), infos


# -- a database's outage: handed back for free, unless it is a refused first connect


def _database_refused(*, lost: bool) -> OutageError:
    return OutageError("postgres: cannot connect to db:6543/app: connection refused", lost=lost)


async def _run_failing(error: OutageError, *, free_retries: int) -> Source:
    async def connects(context: TaskContext) -> TaskResult:
        raise error

    source = Source(dataclasses.replace(_task(1), free_retries=free_retries))
    runtime = Runtime(
        source, {"test": connects}, name="test runtime", concurrency=1, max_backoff_seconds=2.0
    )
    running = asyncio.create_task(runtime.run())
    await asyncio.wait_for(source.until(lambda: bool(source.released or source.failed)), 60)
    await runtime.stop(grace_seconds=1)
    await running
    return source


@pytest.mark.looptime
async def test_a_refused_first_connect_outside_an_outage_spends_an_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="setu.runtime")
    source = await _run_failing(_database_refused(lost=False), free_retries=0)
    message = "postgres: cannot connect to db:6543/app: connection refused"
    assert source.failed == [("task-1", message, True)], "retryable, an attempt spent"
    assert source.released == []
    assert "database refused the first connect; not an outage, the attempt is spent" in caplog.text


@pytest.mark.looptime
async def test_a_refused_first_connect_in_an_outage_streak_is_handed_back() -> None:
    source = await _run_failing(_database_refused(lost=False), free_retries=1)
    assert [(r[0], r[3]) for r in source.released] == [("task-1", True)]
    assert source.failed == []


@pytest.mark.looptime
async def test_a_lost_connection_is_handed_back_on_its_first_outage() -> None:
    source = await _run_failing(_database_refused(lost=True), free_retries=0)
    assert [(r[0], r[3]) for r in source.released] == [("task-1", True)]
    assert source.failed == []
