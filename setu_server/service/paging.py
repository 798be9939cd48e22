"""Opaque page tokens: what the next page starts after, bound to its query."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from setu_client.errors import InvalidArgument


def encode(position: dict[str, Any], query: str) -> str:
    body = {"p": position, "q": _fingerprint(query)}
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")


def decode(token: str, query: str) -> dict[str, Any] | None:
    """The position a token names; None for no token. A token made for other
    filters, or not made by us, is INVALID_ARGUMENT."""
    if not token:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        body = json.loads(base64.urlsafe_b64decode(padded.encode()))
        position = body["p"]
        fingerprint = body["q"]
    except (ValueError, KeyError, TypeError):
        raise InvalidArgument("page_token: not a token this server issued") from None
    if fingerprint != _fingerprint(query) or not isinstance(position, dict):
        raise InvalidArgument("page_token: issued for different filters; start again without it")
    return position


def _fingerprint(query: str) -> str:
    return hashlib.sha256(query.encode()).hexdigest()[:16]
