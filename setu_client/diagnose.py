"""Why a call did not reach setu-server, in a few words, and an outage's log.

grpc reports a failed connection as UNAVAILABLE with a text of its own
("failed to connect to all addresses; last error: UNKNOWN: ipv4:…: Tls
handshake failed …: CERTIFICATE_VERIFY_FAILED …"). `cause_of` reads that
text once, here, into a short cause a person can act on; the agent's and the
worker's log (`Outage`) and the CLI's one-line errors all say it. The texts
matched are grpcio's own, as tests/unit/test_diagnose.py records them from
real connections.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from setu_client.errors import SetuError

_HTTP_STATUS = re.compile(r"Received http2 header with status: (\d{3})")
_FAILED_TO_CONNECT = "failed to connect to all addresses"


def _details(error: BaseException) -> str:
    if isinstance(error, SetuError):
        return error.message
    details = getattr(error, "details", None)
    if callable(details):  # grpc.aio.AioRpcError
        return str(details() or "")
    return str(error)


def cause_of(error: BaseException, *, tls: bool = False) -> str | None:
    """A short cause when `error` says the server was not reached (or not
    spoken to: a proxy or a non-gRPC port answered); None when the server
    itself answered. `tls` says whether the caller spoke TLS, which tells a
    closed plaintext connection (a TLS port) from a closed TLS one (a
    client certificate refused)."""
    text = _details(error)
    status = _HTTP_STATUS.search(text)
    if status:
        return f"a proxy or load balancer in between answered HTTP {status.group(1)}"
    for pattern, cause in _CAUSES:
        if pattern in text:
            return cause
    if "Socket closed" in text or "Connection reset" in text:
        if _FAILED_TO_CONNECT not in text:
            return "the connection was closed (the server stopped or restarted?)"
        if tls:
            return (
                "the server closed the connection during the TLS handshake: it may require "
                "a client certificate (--client-cert/--client-key) or refuse this one"
            )
        return (
            "the server closed the connection at once: plaintext spoken to a TLS port? "
            "(connect with --tls)"
        )
    code = getattr(error, "code", None)
    name = getattr(code() if callable(code) else code, "name", "")
    if name == "UNAVAILABLE":
        return (text.splitlines() or ["unavailable"])[0][:300]
    if name == "DEADLINE_EXCEEDED":
        return "no answer within the call's deadline (a stalled server, or packets dropped)"
    return None


# Substrings of grpc's texts, most specific first.
_CAUSES: tuple[tuple[str, str], ...] = (
    (
        "CERTIFICATE_VERIFY_FAILED",
        "TLS handshake failed: the server's certificate is not signed by a CA this client "
        "trusts (--root-cert names the CA that signed it)",
    ),
    (
        "Hostname Verification Check failed",
        "TLS handshake failed: the server's certificate does not name this address "
        "(connect by a name the certificate lists)",
    ),
    (
        "WRONG_VERSION_NUMBER",
        "TLS handshake failed: TLS spoken to a plaintext port (drop --tls, or give the "
        "server SETU_TLS_CERT)",
    ),
    (
        "Trying to connect an http1.x server",
        "an HTTP/1 server answered, not gRPC (a wrong port, or a proxy without HTTP/2)",
    ),
    ("Tls handshake failed", "TLS handshake failed"),
    ("Ssl handshake failed", "TLS handshake failed"),
    ("DNS resolution failed", "DNS resolution failed: the server's name is not known"),
    ("errors resolving", "DNS resolution failed: the server's name is not known"),
    ("Connection refused", "connection refused: nothing listens on that port"),
    ("Network is unreachable", "network unreachable"),
    ("No route to host", "no route to host"),
    ("Connection timed out", "connection timed out"),
    ("keepalive watchdog timeout", "the connection went silent (keepalive pings unanswered)"),
)


class Outage:
    """The log of one runtime's outages: the first failure at WARNING,
    naming the address and the cause; the same cause again at DEBUG, and at
    WARNING every `remind_seconds` while it lasts; a new cause at WARNING;
    and its end at INFO, `reconnected to X after N s`. `failed()` is told
    every failed attempt, `reached()` every answer from the server."""

    def __init__(
        self,
        target: str,
        *,
        tls: bool = False,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] | None = None,
        remind_seconds: float = 300.0,
    ) -> None:
        self.target = target
        self._tls = tls
        self._log = logger or logging.getLogger("setu.runtime")
        self._clock = clock
        self._remind = remind_seconds
        self.since: float | None = None
        self._cause = ""
        self._said_at = 0.0

    def _now(self) -> float:
        if self._clock is not None:
            return self._clock()
        import asyncio  # the loop's clock, as every wait here

        return asyncio.get_running_loop().time()

    def cause(self, error: BaseException) -> str | None:
        return cause_of(error, tls=self._tls)

    def failed(self, error: BaseException, *, who: str = "", attempt: int = 0) -> None:
        now = self._now()
        cause = self.cause(error) or (_details(error).splitlines() or [type(error).__name__])[0]
        extra = {"who": who, "server": self.target, "cause": cause, "attempt": attempt}
        if self.since is None:
            self.since, self._cause, self._said_at = now, cause, now
            self._log.warning(f"cannot reach {self.target}: {cause}; backing off", extra=extra)
        elif cause != self._cause or now - self._said_at >= self._remind:
            self._cause, self._said_at = cause, now
            extra["seconds"] = round(now - self.since, 1)
            self._log.warning(
                f"still cannot reach {self.target} after {now - self.since:.0f} s: {cause}; "
                "backing off",
                extra=extra,
            )
        else:
            self._log.debug(f"still cannot reach {self.target}: {cause}", extra=extra)

    def reached(self, *, who: str = "") -> None:
        if self.since is None:
            return
        seconds = self._now() - self.since
        self.since = None
        self._log.info(
            f"reconnected to {self.target} after {seconds:.1f} s",
            extra={"who": who, "server": self.target, "seconds": round(seconds, 1)},
        )
