"""The cloud worker's idle connections, kept for the next run of the same
connection (docs/operations.md, the benchmarks).

Opening a PostgreSQL connection costs a TCP handshake, authentication and
the codec setup, several round trips that a 10-row run pays twice. So a
connection a run finished with cleanly goes back here, and the next run of
the same connection takes it instead of opening another. What keeps that
safe:

- An idle connection belongs to one (workspace, connection) and to the exact
  config it was opened with, secrets resolved: a changed config, a rotated
  secret or another workspace never meets it (only a digest of the config is
  kept, not the secrets). A different config closes the old ones at once.
- Egress is checked again on every reuse: each host the connection vetted
  when it opened is asked of the current policy again; a host that now
  resolves elsewhere, or that the policy now refuses, closes the connection
  (and a refusal fails the run, as it would have on opening).
- A connection is reset (rollback, `RESET ALL`, locks and listens dropped)
  before reuse, which also proves it is alive; one that fails is closed and
  a fresh one opened. One that ended in an error, or inside a transaction,
  is closed instead of kept.
- Idle connections close after `idle_seconds` (event-loop time), and all of
  them at stop.

Only connectors that can be reset (`Reusable`, PostgreSQL) are kept; the
others close as they always did.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

from setu_agent.handlers import open_provider
from setu_engine.capabilities import capabilities_of
from setu_engine.providers.base import Connector
from setu_engine.support.egress import Egress

log = logging.getLogger("setu.worker.connections")

# How long a connection no run uses stays open (SETU_WORKER_IDLE_CONNECTION_SECONDS).
IDLE_SECONDS = 60.0
# Idle connections kept per (workspace, connection): one per concurrent run.
MAX_IDLE_PER_CONNECTION = 4


@runtime_checkable
class Reusable(Protocol):
    """A connector that can hand its session to the next run."""

    def idle(self) -> bool:
        """True when the session is open and outside any transaction."""
        ...

    async def reset(self) -> None:
        """The session as freshly opened; raises when it is gone."""
        ...


@dataclass(frozen=True)
class Vetted:
    """One address the egress policy answered while the connection opened."""

    host: str
    port: int
    field: str
    address: str


class _Recording:
    """The policy in force, remembering every answer it gave."""

    def __init__(self, egress: Egress) -> None:
        self._egress = egress
        self.answers: list[Vetted] = []

    async def address(self, host: str, port: int, field: str) -> str:
        answer = await self._egress.address(host, port, field)
        self.answers.append(Vetted(host, port, field, answer))
        return answer


@dataclass
class _Idle:
    connector: Connector
    fingerprint: str
    vetted: tuple[Vetted, ...]
    timer: asyncio.TimerHandle | None = None


@dataclass(frozen=True)
class Opened:
    """A connector a run holds, with what the cache needs to take it back."""

    connector: Connector
    key: tuple[str, str]
    fingerprint: str
    vetted: tuple[Vetted, ...]
    reused: bool


def fingerprint(provider: str, config: dict[str, Any], root: Path | None) -> str:
    """A digest of everything the connection was opened with."""
    text = json.dumps([provider, config, str(root)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class ConnectionCache:
    idle_seconds: float = IDLE_SECONDS
    max_idle: int = MAX_IDLE_PER_CONNECTION
    _idle: dict[tuple[str, str], list[_Idle]] = field(default_factory=dict)
    _held: dict[int, Opened] = field(default_factory=dict)
    _closing: set[asyncio.Task[None]] = field(default_factory=set)
    _stopped: bool = False

    async def take(
        self,
        workspace_id: str,
        connection_id: str,
        provider: str,
        config: dict[str, Any],
        egress: Egress | None,
        root: Path | None,
    ) -> Connector:
        """An idle connector of this connection and config that passes its
        checks, else a fresh one."""
        key = (workspace_id, connection_id)
        digest = fingerprint(provider, config, root)
        entries = self._idle.get(key, [])
        for stale in [e for e in entries if e.fingerprint != digest]:
            # The connection's config or a secret changed: those sessions are
            # of a connection that no longer exists.
            entries.remove(stale)
            self._close_later(stale)
        while entries:
            entry = entries.pop()
            if entry.timer is not None:
                entry.timer.cancel()
            if await self._still_good(entry, egress):
                return self._hold(Opened(entry.connector, key, digest, entry.vetted, reused=True))
        recording = _Recording(egress) if egress is not None else None
        connector = await open_provider(provider, config, recording, root)
        vetted = tuple(recording.answers) if recording is not None else ()
        return self._hold(Opened(connector, key, digest, vetted, reused=False))

    def _hold(self, opened: Opened) -> Connector:
        self._held[id(opened.connector)] = opened
        return opened.connector

    def reused(self, connector: Connector) -> bool:
        """Whether a held connector came from the cache (tests, metrics)."""
        held = self._held.get(id(connector))
        return held is not None and held.reused

    async def give_back(self, connector: Connector) -> None:
        """The run is done with it: kept when its session is open and
        outside a transaction (it is reset before its next use), else closed.
        A run that failed half way rolled its transaction back already."""
        opened = self._held.pop(id(connector), None)
        if opened is None:
            await _close(connector)
            return
        entries = self._idle.setdefault(opened.key, [])
        keep = (
            not self._stopped
            and self.idle_seconds > 0
            and capabilities_of(connector).reusable_sessions
            and cast(Reusable, connector).idle()
            and len(entries) < self.max_idle
        )
        if not keep:
            await _close(connector)
            return
        entry = _Idle(connector, opened.fingerprint, opened.vetted)
        entry.timer = asyncio.get_running_loop().call_later(
            self.idle_seconds, self._expire, opened.key, entry
        )
        entries.append(entry)

    async def _still_good(self, entry: _Idle, egress: Egress | None) -> bool:
        """The entry's hosts vetted again by the policy in force (a refusal
        closes it and raises), and its session reset."""
        try:
            moved = await _moved(entry.vetted, egress)
        except BaseException:
            await _close(entry.connector)
            raise
        if moved:
            log.info("a cached connection's host now resolves elsewhere; reopening")
            await _close(entry.connector)
            return False
        try:
            await cast(Reusable, entry.connector).reset()
        except Exception as exc:  # gone while idle: a fresh one is opened
            log.info("a cached connection failed its reset (%s); reopening", exc)
            await _close(entry.connector)
            return False
        return True

    def _expire(self, key: tuple[str, str], entry: _Idle) -> None:
        entries = self._idle.get(key, [])
        if entry in entries:
            entries.remove(entry)
            self._close_later(entry)
        if not entries:
            self._idle.pop(key, None)

    def _close_later(self, entry: _Idle) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
        task = asyncio.get_running_loop().create_task(_close(entry.connector))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def idle_count(self, workspace_id: str | None = None) -> int:
        return sum(
            len(entries)
            for (workspace, _), entries in self._idle.items()
            if workspace_id is None or workspace == workspace_id
        )

    async def close(self) -> None:
        """Every idle connection closed; later ones close when given back."""
        self._stopped = True
        for entries in self._idle.values():
            for entry in entries:
                self._close_later(entry)
        self._idle.clear()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


async def _moved(vetted: tuple[Vetted, ...], egress: Egress | None) -> bool:
    """True when a host the connection vetted now resolves to another
    address; the policy's own error when it now refuses one."""
    for was in vetted if egress is not None else ():
        assert egress is not None
        if await egress.address(was.host, was.port, was.field) != was.address:
            return True
    return False


async def _close(connector: Connector) -> None:
    try:
        await connector.close()
    except Exception as exc:  # a session already gone has nothing left to close
        log.debug("closing a cached connection: %s", exc)
