"""A dedicated LISTEN connection that survives losing its database session.

Never a pooled connection: a pool would hand it to somebody else. A periodic
ping with a short timeout of its own notices a silently dead or hung session
(a backend that stopped answering wakes nobody) within `ping_interval +
ping_timeout`; on any loss the listener reconnects
with capped backoff, re-LISTENs, and calls `on_reconnect` so that whoever
depends on notifications can re-read what a lost notification might have
told them.

Handlers run in asyncpg's callback, once per notification, some 450 in one
turn of the event loop when a storm arrives (a 256 KiB read): each must be
O(1) and defer real work (the watch hub only queues the payload, see
`setu_server/service/watch.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import asyncpg

from setu_server.store.queries import QUERIES

log = logging.getLogger(__name__)

Handler = Callable[[str], None]

APPLICATION_NAME = "setu-listener"


class Listener:
    def __init__(
        self,
        url: str,
        handlers: dict[str, Handler],
        on_reconnect: Callable[[], Awaitable[None]],
        *,
        ping_interval: float = 5.0,
        ping_timeout: float = 2.0,
        max_backoff: float = 5.0,
    ) -> None:
        self._url = url
        self._handlers = handlers
        self._on_reconnect = on_reconnect
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._max_backoff = max_backoff
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self.connected = asyncio.Event()
        # Observability (and tests): how many sessions this listener has had.
        self.sessions = 0
        self._session_changed = asyncio.Condition()
        # Notifications handled (loop time of the last): a session that
        # delivers them is alive even when a ping's answer is late.
        self._heard = 0

    async def start(self) -> None:
        """Connect and LISTEN before returning, so no notification is missed
        by anyone who starts waiting after start()."""
        conn = await self._connect()
        self._task = asyncio.create_task(self._run(conn), name="setu-listener")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _connect(self) -> asyncpg.Connection:
        conn: asyncpg.Connection = await asyncpg.connect(
            self._url, server_settings={"application_name": APPLICATION_NAME}
        )
        self._lost = asyncio.Event()
        conn.add_termination_listener(lambda _: self._lost.set())
        for channel in self._handlers:
            await conn.add_listener(channel, self._dispatch)
        self.sessions += 1
        self.connected.set()
        async with self._session_changed:
            self._session_changed.notify_all()
        return conn

    async def wait_for_session(self, number: int) -> None:
        """Until this listener has LISTENed in its `number`-th session."""
        async with self._session_changed:
            await self._session_changed.wait_for(lambda: self.sessions >= number)

    def _dispatch(self, conn: object, pid: int, channel: str, payload: str) -> None:
        self._heard += 1
        try:
            self._handlers[channel](payload)
        except Exception:
            log.exception("notification handler failed", extra={"channel": channel})

    async def _run(self, conn: asyncpg.Connection) -> None:
        backoff = 0.1
        while True:
            try:
                await self._hold(conn)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
                log.warning("listen connection lost", extra={"error": str(exc)})
            self.connected.clear()
            await _close_quietly(conn)
            while True:
                try:
                    conn = await self._connect()
                    break
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    log.warning("listen reconnect failed", extra={"error": str(exc)})
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self._max_backoff)
            backoff = 0.1
            log.info("listen connection restored", extra={"sessions": self.sessions})
            try:
                await self._on_reconnect()
            except Exception:
                log.exception("re-read after reconnect failed")

    async def _hold(self, conn: asyncpg.Connection) -> None:
        """Until the session is lost: ping now and then, wake at once on termination."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._ping_interval):
                    await self._lost.wait()
            if self._lost.is_set() or conn.is_closed():
                raise OSError("listen session terminated")
            heard = self._heard
            try:
                async with asyncio.timeout(self._ping_timeout):
                    await conn.fetchval(QUERIES.ping)
            except TimeoutError:
                # A storm of notifications (one commit ending 50,000 watched
                # jobs) can keep this loop from reading the ping's answer in
                # time; a session that delivered notifications meanwhile is
                # alive, and a reconnect would re-read every watched job.
                if self._heard == heard:
                    raise


async def _close_quietly(conn: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):
        conn.terminate()
