"""Opaque page tokens: what the next page starts after, bound to its query,
and signed, so a token the caller made up or edited is refused before its
position reaches a query.

The signing key is `SETU_PAGE_TOKEN_KEY`; unset, each process draws a random
one, and a token then works only on the process that issued it (set the same
key on every replica behind a load balancer).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from typing import Any

from setu_client.errors import InvalidArgument

_SIGNATURE_BYTES = 16  # HMAC-SHA256, truncated: 128 bits is ample for a page token

_key = secrets.token_bytes(32)


def use_key(key: str) -> None:
    """Sign and check tokens with `key` from now on; empty keeps the
    process's random key."""
    global _key
    if key:
        _key = hashlib.sha256(b"setu page token\x00" + key.encode()).digest()


def encode(position: dict[str, Any], query: str) -> str:
    body = json.dumps({"p": position, "q": _fingerprint(query)}, separators=(",", ":")).encode()
    return f"{_b64(body)}.{_b64(_sign(body))}"


def decode(token: str, query: str) -> dict[str, Any] | None:
    """The position a token names; None for no token. A token made for other
    filters, or not made by us, is INVALID_ARGUMENT."""
    if not token:
        return None
    not_ours = InvalidArgument("page_token: not a token this server issued")
    body_text, _, signature_text = token.partition(".")
    try:
        body = _unb64(body_text)
        signature = _unb64(signature_text)
    except (ValueError, binascii.Error):
        raise not_ours from None
    if not hmac.compare_digest(signature, _sign(body)):
        raise not_ours
    try:
        parsed = json.loads(body)
        position, fingerprint = parsed["p"], parsed["q"]
    except (ValueError, KeyError, TypeError):
        raise not_ours from None
    if fingerprint != _fingerprint(query) or not isinstance(position, dict):
        raise InvalidArgument("page_token: issued for different filters; start again without it")
    return position


def _sign(body: bytes) -> bytes:
    return hmac.new(_key, body, hashlib.sha256).digest()[:_SIGNATURE_BYTES]


def _fingerprint(query: str) -> str:
    return hashlib.sha256(query.encode()).hexdigest()[:16]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    if not text.isascii():
        raise ValueError("not base64")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
