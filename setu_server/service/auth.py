"""Who is calling, and may they call this service?"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable

from setu_client.clock import Clock
from setu_client.errors import PermissionDenied, Unauthenticated
from setu_server.models import Principal, Role
from setu_server.service.secrets import TokenKind, digest, kind_of, same_digest
from setu_server.store import tenancy
from setu_server.store.db import Database

log = logging.getLogger("setu.auth")

_ROLE_OF_KIND = {
    TokenKind.API_KEY: Role.CLIENT,
    TokenKind.AGENT: Role.AGENT,
    TokenKind.ADMIN: Role.ADMIN,
}

_WRONG_ROLE = {
    Role.CLIENT: "this service takes a workspace API key, not {what}",
    Role.AGENT: "this service takes an agent token, not {what}",
    Role.ADMIN: "this service takes the admin token, not {what}",
    Role.WORKER: "this service takes a cloud worker's token, not {what}",
}

_WHAT = {
    Role.CLIENT: "an API key",
    Role.AGENT: "an agent token",
    Role.ADMIN: "the admin token",
    Role.WORKER: "a cloud worker's token",
}

# A credential that names its kind by its prefix but matches none stored.
_NOUN = {TokenKind.API_KEY: "API key", TokenKind.AGENT: "agent token", TokenKind.ADMIN: "token"}

# Who may call a service that requires a role: a cloud worker is a runtime
# too, and takes the cloud's tasks through the agents' service.
_ACCEPTED = {
    Role.CLIENT: {Role.CLIENT},
    Role.AGENT: {Role.AGENT, Role.WORKER},
    Role.ADMIN: {Role.ADMIN},
    Role.WORKER: {Role.WORKER},
}


# Where a revocation is announced to every server process and replica
# (payload: the announcing process's own mark, so it knows its echo).
AUTH_CHANNEL = "setu_auth"
# How long a revoking call waits for its announcement to come back before it
# answers anyway (the LISTEN session down: the cache's expiry still bounds it).
ECHO_TIMEOUT_SECONDS = 2.0

Announce = Callable[[str], Awaitable[None]]


class Authenticator:
    """Credentials are checked against the database, and a good answer is
    remembered for `cache_seconds` (on the loop clock), keyed by the
    authorization header itself: a busy agent or client then costs no query,
    no hash and no parsing per call. Unknown credentials are never cached.

    A revocation drops every remembered answer here at once (`forget`) and is
    announced on AUTH_CHANNEL to every other process and replica, which drop
    theirs when it arrives (`revoked_elsewhere`); the call that revoked
    answers only once its own announcement has come back through LISTEN
    (`settled`), so by then PostgreSQL has handed it to every listener. A
    lookup that began before a revocation does not store its answer."""

    def __init__(
        self,
        pool: Database,
        clock: Clock,
        admin_token_digest: bytes | None,
        cache_seconds: float = 5.0,
        worker_token_digest: bytes | None = None,
        announce: Announce | None = None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._admin_digest = admin_token_digest
        self._worker_digest = worker_token_digest
        self._cache_seconds = cache_seconds
        self._cache: dict[str, tuple[Principal, float]] = {}
        # Bumped by every revocation: a lookup from before it stores nothing.
        self._generation = 0
        self._announce = announce
        self._mark = secrets.token_hex(8)
        self._announced = 0
        # Announcements of ours not yet back, by payload.
        self._echoes: dict[str, asyncio.Future[None]] = {}
        self._sending: set[asyncio.Task[None]] = set()

    def forget(self) -> None:
        """Drop every remembered credential (after a revocation), here and,
        by announcement, in every other process."""
        self._drop()
        if self._announce is None:
            return
        self._announced += 1
        payload = f"{self._mark}:{self._announced}"
        self._echoes[payload] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._send(payload))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def revoked_elsewhere(self, payload: str) -> None:
        """A revocation announced on AUTH_CHANNEL (ours come back too)."""
        self._drop()
        echo = self._echoes.pop(payload, None)
        if echo is not None and not echo.done():
            echo.set_result(None)

    def missed_announcements(self) -> None:
        """The LISTEN session reconnected: an announcement may have been lost."""
        self._drop()

    @property
    def unsettled(self) -> bool:
        """Announcements of ours have not come back yet."""
        return bool(self._echoes)

    async def settled(self) -> None:
        """Returns once every announcement made so far has come back (or
        ECHO_TIMEOUT_SECONDS passed)."""
        pending = list(self._echoes.values())
        if pending:
            await asyncio.wait(pending, timeout=ECHO_TIMEOUT_SECONDS)
        for payload in [p for p, echo in self._echoes.items() if echo in pending]:
            self._echoes.pop(payload, None)

    def _drop(self) -> None:
        self._generation += 1
        self._cache.clear()

    async def _send(self, payload: str) -> None:
        assert self._announce is not None
        try:
            await self._announce(payload)
        except Exception:  # the database away: the caches' expiry bounds the rest
            log.warning("could not announce a revocation", exc_info=True)
            echo = self._echoes.pop(payload, None)
            if echo is not None and not echo.done():
                echo.set_result(None)

    async def authenticate(self, authorization: str | None, required: Role) -> Principal:
        """The principal behind an `authorization` header, checked against the role
        the service requires. Never logs or echoes the credential."""
        loop_now = asyncio.get_running_loop().time()
        cached = self._cache.get(authorization) if authorization else None
        if cached is not None and cached[1] > loop_now:
            principal = cached[0]
        else:
            generation = self._generation
            principal = await self._identify(_bearer(authorization))
            if self._cache_seconds > 0 and generation == self._generation and authorization:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[authorization] = (principal, loop_now + self._cache_seconds)
        if principal.role not in _ACCEPTED[required]:
            raise PermissionDenied(_WRONG_ROLE[required].format(what=_WHAT[principal.role]))
        return principal

    async def _identify(self, token: str) -> Principal:
        token_digest = digest(token)
        # The operator chooses the admin token, so it need not carry a prefix.
        if self._admin_digest is not None and same_digest(token_digest, self._admin_digest):
            return Principal(Role.ADMIN)
        if self._worker_digest is not None and same_digest(token_digest, self._worker_digest):
            return Principal(Role.WORKER)
        return await self._look_up(token, token_digest)

    async def _look_up(self, token: str, token_digest: bytes) -> Principal:
        kind = kind_of(token)
        if kind is None:
            raise Unauthenticated("unknown credential")
        now = self._clock.sql_now()
        if kind is TokenKind.API_KEY:
            found = await tenancy.authenticate_api_key(self._pool, token_digest, now)
            if found:
                return Principal(Role.CLIENT, workspace_id=found[1], credential_id=found[0])
        elif kind is TokenKind.AGENT:
            found = await tenancy.authenticate_agent(self._pool, token_digest, now)
            if found:
                return Principal(Role.AGENT, workspace_id=found[1], agent_id=found[0])
        raise Unauthenticated(f"this {_NOUN[kind]} is unknown or has been revoked")


def _bearer(authorization: str | None) -> str:
    if not authorization:
        raise Unauthenticated("missing credential: send 'authorization: Bearer <token>'")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("malformed authorization header: expected 'Bearer <token>'")
    return token.strip()
