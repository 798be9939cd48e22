"""The LISTEN connection against a backend that hangs without closing (its
process stopped with SIGSTOP): the ping's own timeout bounds how long the
listener trusts a session that no longer answers."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import asyncpg
import pytest

from setu_server.store.listener import APPLICATION_NAME, Listener

INTERVAL = 5.0
TIMEOUT = 1.0


class LossSeen(logging.Handler):
    """Notes the loop time at which the listener declares its session lost."""

    def __init__(self) -> None:
        super().__init__()
        self.at: float | None = None
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "listen connection lost" and self.at is None:
            self.at = asyncio.get_running_loop().time()
            self.seen.set()


@pytest.mark.looptime(noop_cycles=5000)
async def test_a_hung_backend_is_given_up_within_the_ping_interval_and_timeout(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async def nothing() -> None:
        return None

    listener = Listener(
        database_url,
        {"setu_job": lambda _: None},
        nothing,
        ping_interval=INTERVAL,
        ping_timeout=TIMEOUT,
    )
    loss = LossSeen()
    logger = logging.getLogger("setu_server.store.listener")
    logger.addHandler(loss)
    await listener.start()
    pid = await pool.fetchval(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 "
        "AND datname = current_database()",
        APPLICATION_NAME,
    )
    loop = asyncio.get_running_loop()
    stopped_at = loop.time()
    os.kill(pid, signal.SIGSTOP)
    try:
        await loss.seen.wait()
        await listener.wait_for_session(2)
    finally:
        os.kill(pid, signal.SIGCONT)
        logger.removeHandler(loss)
        await listener.close()
        await pool.execute("SELECT pg_terminate_backend($1)", pid)
    assert loss.at is not None
    # On the loop's clock: the rest of one interval, then one ping timeout.
    assert loss.at - stopped_at <= INTERVAL + TIMEOUT + 0.01
