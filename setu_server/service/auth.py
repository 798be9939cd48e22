"""Who is calling, and may they call this service?"""

from __future__ import annotations

import asyncio

from setu_client.clock import Clock
from setu_client.errors import PermissionDenied, Unauthenticated
from setu_server.models import Principal, Role
from setu_server.service.secrets import TokenKind, digest, kind_of, same_digest
from setu_server.store import tenancy
from setu_server.store.db import Database

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


class Authenticator:
    """Credentials are checked against the database, and a good answer is
    remembered for `cache_seconds` (on the loop clock): a busy agent or client
    then costs no query per call. A revocation made through this server takes
    effect at once (`forget`); one made through another replica within
    `cache_seconds`. Unknown credentials are never cached."""

    def __init__(
        self,
        pool: Database,
        clock: Clock,
        admin_token_digest: bytes | None,
        cache_seconds: float = 5.0,
        worker_token_digest: bytes | None = None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._admin_digest = admin_token_digest
        self._worker_digest = worker_token_digest
        self._cache_seconds = cache_seconds
        self._cache: dict[bytes, tuple[Principal, float]] = {}

    def forget(self) -> None:
        """Drop every remembered credential (after a revocation)."""
        self._cache.clear()

    async def authenticate(self, authorization: str | None, required: Role) -> Principal:
        """The principal behind an `authorization` header, checked against the role
        the service requires. Never logs or echoes the credential."""
        token = _bearer(authorization)
        principal = await self._identify(token)
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
        loop_now = asyncio.get_running_loop().time()
        cached = self._cache.get(token_digest)
        if cached is not None and cached[1] > loop_now:
            return cached[0]
        principal = await self._look_up(token, token_digest)
        if self._cache_seconds > 0:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[token_digest] = (principal, loop_now + self._cache_seconds)
        return principal

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
