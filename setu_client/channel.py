"""Channels to setu-server: credentials on every call, HTTP/2 keepalive."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc

from setu_client.tls import TlsConfig, tls_config

# Ping an idle connection so a silently dead peer (a NAT that dropped the
# flow, a crashed or stopped host) is noticed in seconds, not at the next
# call's timeout. grpcio times a ping out at `grpc.http2.ping_timeout_ms`
# (default 60 s) whatever keepalive_timeout_ms says, so both are set: a dead
# peer ends every call on the channel UNAVAILABLE within about 30 s.
KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.ping_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)


def _with_auth(details: grpc.aio.ClientCallDetails, header: tuple[str, str]) -> Any:
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    metadata.add(*header)
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


# grpc.aio files each interceptor under its first matching kind only, so
# unary and streaming calls need an interceptor object each.
class _UnaryAuth(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(_with_auth(details, self._header), request)


class _StreamAuth(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(_with_auth(details, self._header), request)


def open_channel(
    target: str,
    token: str | None = None,
    *,
    tls: bool | TlsConfig | None = False,
    root_certificates: bytes | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Channel:
    """An asyncio channel that sends `authorization: Bearer <token>` on every call.

    `tls` is a TlsConfig (roots, client certificate), or True for TLS with
    `root_certificates` (None: the system's roots); plaintext otherwise."""
    interceptors: Any = [_UnaryAuth(token), _StreamAuth(token)] if token else None
    all_options = [*KEEPALIVE_OPTIONS, *options]
    config = tls_config(tls, root_certificates)
    if config is not None:
        return grpc.aio.secure_channel(
            target, config.credentials(), options=all_options, interceptors=interceptors
        )
    return grpc.aio.insecure_channel(target, options=all_options, interceptors=interceptors)
