"""Credentials: made random, shown once, stored as a SHA-256 digest.

The prefix says what a token is (API key, agent token, admin token), so the
server knows where to look it up and can tell a wrong kind of credential
(PERMISSION_DENIED) from an unknown one (UNAUTHENTICATED).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from enum import StrEnum


class TokenKind(StrEnum):
    API_KEY = "setu_ak_"
    AGENT = "setu_ag_"
    ADMIN = "setu_adm_"


@dataclass(frozen=True)
class NewSecret:
    token: str
    prefix: str
    digest: bytes


def new_secret(kind: TokenKind) -> NewSecret:
    token = kind.value + secrets.token_urlsafe(32)
    return NewSecret(token=token, prefix=token[: len(kind.value) + 6], digest=digest(token))


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def kind_of(token: str) -> TokenKind | None:
    for kind in TokenKind:
        if token.startswith(kind.value):
            return kind
    return None


def same_digest(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)
