"""Signed-in sessions: an HttpOnly, SameSite=Strict cookie, signed by the server.

The cookie names the workspace and the API key that signed in (its id, never
the key), a random nonce and an expiry, with an HMAC over them. Each request
checks the signature and asks the service layer whether that key is still
live, so revoking the key signs its sessions out. The CSRF token of a
session is an HMAC of its nonce: forms carry it, and POSTs without it are
refused. The signing key is derived from SETU_PAGE_TOKEN_KEY when set (every
replica accepts every session, and a restart keeps them), else drawn at
random per process; `setu dev` sets it from the key it keeps with its
credentials (setu_server/dev.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

COOKIE = "setu_session"
LIFETIME = timedelta(hours=12)


@dataclass(frozen=True)
class Session:
    workspace_id: UUID
    credential_id: UUID
    nonce: str
    expires_at: datetime


class SessionSigner:
    def __init__(self, configured_key: str) -> None:
        if configured_key:
            seed = b"setu-monitor-session|" + configured_key.encode()
            self._key = hashlib.sha256(seed).digest()
        else:
            self._key = secrets.token_bytes(32)

    def issue(self, workspace_id: UUID, credential_id: UUID, now: datetime) -> tuple[str, Session]:
        """A new session and its cookie value."""
        session = Session(workspace_id, credential_id, secrets.token_urlsafe(16), now + LIFETIME)
        body = json.dumps(
            {
                "w": str(session.workspace_id),
                "k": str(session.credential_id),
                "n": session.nonce,
                "e": session.expires_at.isoformat(),
            },
            separators=(",", ":"),
        ).encode()
        return f"{_b64(body)}.{_b64(self._sign(b'session|' + body))}", session

    def read(self, cookie: str | None, now: datetime) -> Session | None:
        """The session a cookie carries, or None when it is absent, forged or expired."""
        if not cookie or "." not in cookie:
            return None
        encoded, _, signature = cookie.partition(".")
        try:
            body = _unb64(encoded)
            if not hmac.compare_digest(_unb64(signature), self._sign(b"session|" + body)):
                return None
            data = json.loads(body)
            session = Session(
                UUID(data["w"]), UUID(data["k"]), str(data["n"]), datetime.fromisoformat(data["e"])
            )
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires_at > now else None

    def csrf_token(self, session: Session) -> str:
        return _b64(self._sign(b"csrf|" + session.nonce.encode()))

    def csrf_ok(self, session: Session, token: str) -> bool:
        return bool(token) and hmac.compare_digest(token, self.csrf_token(session))

    def _sign(self, data: bytes) -> bytes:
        return hmac.new(self._key, data, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
