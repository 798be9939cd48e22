"""The LISTEN connection's probe: a notification sent through another
connection must come back to the listener, or it says that its session does
not deliver; when probes arrive again it says so, and the fallback re-checks
stop."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest

from setu_server.config import FallbackSettings
from setu_server.maintenance.listen_fallback import FIX, ListenFallback
from setu_server.service.signals import TaskSignals
from setu_server.service.watch import WatchHub
from setu_server.store.listener import UNDELIVERED, Listener, Probe, send_probe
from tests.factories import no_jobs
from tests.pooler import PgBouncer

FAST = {"ping_interval": 0.05, "ping_timeout": 1.0}


async def nothing() -> None:
    return None


def probed(url: str, probe: Probe, verdicts: list[tuple[bool, str]]) -> Listener:
    """A fast-pinging listener on `url` that probes through `probe` and
    keeps its verdicts in `verdicts`."""
    return Listener(
        url,
        {"setu_job": lambda _: None},
        nothing,
        probe=probe,
        on_health=lambda healthy, why: verdicts.append((healthy, why)),
        **FAST,
    )


async def test_a_listener_through_a_transaction_pooler_hears_no_probe(
    database_url: str, pool: asyncpg.Pool, pgbouncer: PgBouncer
) -> None:
    verdicts: list[tuple[bool, str]] = []

    async def probe(channel: str, payload: str) -> None:
        await send_probe(pool, channel, payload)

    listener = probed(pgbouncer.url(database_url), probe, verdicts)
    await listener.start()
    try:
        await listener.wait_for_verdicts(1)
        assert listener.connected.is_set(), "the connection is open: only delivery fails"
        assert not listener.healthy
        assert verdicts == [(False, UNDELIVERED.format(timeout=FAST["ping_timeout"]))]
    finally:
        await listener.close()


async def test_a_probe_late_behind_a_storm_of_notifications_is_not_judged_at_once(
    database_url: str, pool: asyncpg.Pool
) -> None:
    verdicts: list[tuple[bool, str]] = []
    storms = 1  # the first probe is lost while other notifications arrive

    async def probe(channel: str, payload: str) -> None:
        nonlocal storms
        if storms:
            storms -= 1
            await pool.execute("SELECT pg_notify('setu_job', 'storm')")
            channel = "setu_probe_nobody"
        await send_probe(pool, channel, payload)

    listener = probed(database_url, probe, verdicts)
    await listener.start()
    try:
        await listener.wait_for_verdicts(2)
        assert listener.healthy
        assert verdicts == [], "a session busy delivering is not called undelivering"
    finally:
        await listener.close()


async def test_probes_that_arrive_again_make_the_listener_healthy_again(
    database_url: str, pool: asyncpg.Pool
) -> None:
    verdicts: list[tuple[bool, str]] = []
    lost = 2  # the first probes go astray, as through a pooler; then they arrive

    async def probe(channel: str, payload: str) -> None:
        nonlocal lost
        if lost:
            lost -= 1
            channel = "setu_probe_nobody"
        await send_probe(pool, channel, payload)

    listener = probed(database_url, probe, verdicts)
    await listener.start()
    try:
        await listener.wait_for_verdicts(3)
        assert listener.healthy
        assert [healthy for healthy, _ in verdicts] == [False, True], "told once each way"
    finally:
        await listener.close()


async def test_the_fallback_warns_once_runs_while_unhealthy_and_stops_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="setu_server.maintenance.listen_fallback")
    signals = TaskSignals()
    hub = WatchHub(no_jobs)
    fallback = ListenFallback(hub, signals, FallbackSettings(interval_seconds=0.01))
    passes: list[int] = []
    three = asyncio.Event()

    async def ran(_: object) -> None:
        passes.append(hub.rechecks)
        if len(passes) >= 3:
            three.set()

    fallback.hooks.ran = ran
    fallback.listen_health(False, "no probe came back")
    fallback.listen_health(False, "no probe came back")
    await three.wait()
    loop = fallback._task
    fallback.listen_health(True, "")
    assert not fallback.active
    assert loop is not None and fallback._last is not None
    await fallback._last  # the one re-check after healthy again
    assert loop.done()  # and the loop of re-checks is over
    await fallback.stop()
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    warnings = [m for level, m in messages if level == logging.WARNING]
    assert len(warnings) == 1 and FIX in warnings[0] and "every 0.01 s" in warnings[0]
    assert any("arrive on the LISTEN connection again" in m for _, m in messages)
