"""A dedicated LISTEN connection that survives losing its database session.

Never a pooled connection: a pool would hand it to somebody else. A periodic
ping with a short timeout of its own notices a silently dead or hung session
(a backend that stopped answering wakes nobody) within `ping_interval +
ping_timeout`; on any loss the listener reconnects
with capped backoff, re-LISTENs, and calls `on_reconnect` so that whoever
depends on notifications can re-read what a lost notification might have
told them.

An open connection is not yet a working LISTEN: through a transaction-mode
pooler the LISTEN lands in whichever PostgreSQL session ran it, which the
pooler then lends to others, and notifications stop reaching this
connection while every ping still answers. So each ping also sends a probe
notification through the pool (`probe`) to a channel only this listener
hears, and names the backend that answered it: the probe must arrive within
the ping timeout, from a session that has not changed. The verdict goes to
`on_health` when it changes (the server falls back to short re-checks while
it is False) and is `healthy`; `delivering` is False from the start when
the URL is known to go through a transaction-mode pooler (`pooled`).

Handlers run in asyncpg's callback, once per notification, some 450 in one
turn of the event loop when a storm arrives (a 256 KiB read): each must be
O(1) and defer real work (the watch hub only queues the payload, see
`setu_server/service/watch.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable

import asyncpg

from setu_server.store.db import Executor, translate_errors
from setu_server.store.queries import QUERIES

log = logging.getLogger(__name__)

Handler = Callable[[str], None]
# Sends `payload` to `channel` through a connection other than the listener's.
Probe = Callable[[str, str], Awaitable[None]]
# (healthy, why): called when the verdict on the LISTEN session changes.
HealthHandler = Callable[[bool, str], None]

APPLICATION_NAME = "setu-listener"

POOLED = "the LISTEN URL goes through a transaction-mode pooler"
UNDELIVERED = "a probe notification did not arrive within {timeout:g} s"
MOVED = "the LISTEN connection moved between PostgreSQL sessions (a transaction-mode pooler)"


async def send_probe(db: Executor, channel: str, payload: str) -> None:
    with translate_errors():
        await db.execute(QUERIES.listen_probe, channel, payload)


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
        probe: Probe | None = None,
        on_health: HealthHandler | None = None,
        pooled: bool = False,
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
        self._probe = probe
        # Told of every change of verdict (the fallback, the health service).
        self.health_handlers: list[HealthHandler] = [on_health] if on_health else []
        self._pooled = pooled
        # A channel of this listener's own: other replicas' probes stay theirs.
        self.probe_channel = f"setu_probe_{secrets.token_hex(8)}"
        self._probes = 0
        # Probes that reached a verdict (tests wait on it).
        self.verdicts = 0
        self._probe_arrived = asyncio.Event()
        self._backend: int | None = None
        self._late_once = False
        # The verdict of the last probe (or, with `pooled`, known at once).
        self.delivering = not pooled
        self.why = POOLED if pooled else ""

    @property
    def healthy(self) -> bool:
        """Connected, and notifications sent through the pool arrive."""
        return self.connected.is_set() and self.delivering

    async def start(self) -> None:
        """Connect and LISTEN before returning, so no notification is missed
        by anyone who starts waiting after start()."""
        if self._pooled:
            for handler in self.health_handlers:
                handler(False, POOLED)
        conn = await self._connect()
        self._task = asyncio.create_task(self._run(conn), name="setu-listener")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _connect(self) -> asyncpg.Connection:
        # No statement cache: its named statements would not survive a
        # pooler, and a ping every few seconds gains nothing from one.
        conn: asyncpg.Connection = await asyncpg.connect(
            self._url,
            server_settings={"application_name": APPLICATION_NAME},
            statement_cache_size=0,
        )
        self._lost = asyncio.Event()
        conn.add_termination_listener(lambda _: self._lost.set())
        for channel in self._handlers:
            await conn.add_listener(channel, self._dispatch)
        if self._probe is not None:
            await conn.add_listener(self.probe_channel, self._probed)
        self._backend = None
        self.sessions += 1
        self.connected.set()
        async with self._session_changed:
            self._session_changed.notify_all()
        return conn

    async def wait_for_session(self, number: int) -> None:
        """Until this listener has LISTENed in its `number`-th session."""
        async with self._session_changed:
            await self._session_changed.wait_for(lambda: self.sessions >= number)

    def _probed(self, conn: object, pid: int, channel: str, payload: str) -> None:
        if payload == str(self._probes):
            self._probe_arrived.set()

    async def wait_for_verdicts(self, number: int) -> None:
        """Until `number` probes have reached a verdict."""
        async with self._session_changed:
            await self._session_changed.wait_for(lambda: self.verdicts >= number)

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
        """Until the session is lost: ping (and probe) at once and then now
        and then, wake at once on termination."""
        while True:
            backend = await self._ping(conn)
            await self._check_delivery(backend)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._ping_interval):
                    await self._lost.wait()
            if self._lost.is_set() or conn.is_closed():
                raise OSError("listen session terminated")

    async def _ping(self, conn: asyncpg.Connection) -> int | None:
        """The backend that answered; None when it answered late but the
        session delivered notifications meanwhile."""
        heard = self._heard
        try:
            async with asyncio.timeout(self._ping_timeout):
                backend: int = await conn.fetchval(QUERIES.ping)
                return backend
        except TimeoutError:
            # A storm of notifications (one commit ending 50,000 watched
            # jobs) can keep this loop from reading the ping's answer in
            # time; a session that delivered notifications meanwhile is
            # alive, and a reconnect would re-read every watched job.
            if self._heard == heard:
                raise
            return None

    async def _check_delivery(self, backend: int | None) -> None:
        """Probe: a notification sent through the pool must arrive here,
        and the session must still be the one that LISTENed."""
        if self._probe is None:
            return
        moved = backend is not None and self._backend is not None and backend != self._backend
        if backend is not None and self._backend is None:
            self._backend = backend
        self._probes += 1
        self._probe_arrived.clear()
        heard = self._heard
        try:
            async with asyncio.timeout(self._ping_timeout):  # a pool busy to the brim
                await self._probe(self.probe_channel, str(self._probes))
        except Exception as exc:
            # The pool cannot reach the database: that says nothing of LISTEN.
            log.debug("listen probe not sent", extra={"error": str(exc)})
            return
        try:
            async with asyncio.timeout(self._ping_timeout):
                await self._probe_arrived.wait()
        except TimeoutError:
            # A storm of notifications can hold the probe's behind it: a
            # session that delivered others meanwhile gets one more probe
            # before it is judged (twice in a row is no storm).
            storm = self._heard != heard and not self._pooled and not self._late_once
            self._late_once = storm
            if storm:
                await self._verdict(self.delivering, self.why)
            else:
                await self._verdict(False, UNDELIVERED.format(timeout=self._ping_timeout))
            return
        self._late_once = False
        if moved:
            self._backend = backend
            await self._verdict(False, MOVED)
        elif self._pooled:
            await self._verdict(False, POOLED)
        else:
            await self._verdict(True, "")

    async def _verdict(self, delivering: bool, why: str) -> None:
        changed = delivering != self.delivering
        self.delivering, self.why = delivering, why
        if changed:
            for handler in self.health_handlers:
                handler(delivering, why)
        self.verdicts += 1
        async with self._session_changed:
            self._session_changed.notify_all()


async def _close_quietly(conn: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):
        conn.terminate()
