"""How long to hold a long-poll, learned per target (docs/operations.md,
"Proxies and load balancers").

A long-poll (WaitJob, WatchJob, LeaseTask) is sent with a deadline, its
window, and the server answers about a second before it. Something between
client and server (a proxy's read timeout, a load balancer's idle timeout)
may end the call sooner: nginx answers HTTP 504, which grpc reports as
UNAVAILABLE "Received http2 header with status: 504"; an L4 balancer resets
the connection. Such a cut is not a failure: the server was reached and held
the call. `LongPollWindow` tells the two apart, learns the interval of the
cuts, shortens the window below it (said once at INFO), and now and then
tries the full window again in case the intermediary has changed.

The SDK (`SetuClient`) and the runtimes (`GrpcTaskSource`) each hold one per
target. It does no I/O and reads time only through the clock it is given.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import time
from collections.abc import Callable

import grpc

log = logging.getLogger("setu.long_poll")

# The window when none is configured: below the 60 s read and idle timeouts
# that nginx, AWS's load balancers and many others default to, so behind
# them the server's answer (a second before the window) always comes first.
DEFAULT_LONG_POLL_SECONDS = 55.0
ENV_LONG_POLL_SECONDS = "SETU_LONG_POLL_SECONDS"
# Never shorter: the server answers a second before the deadline, so a
# shorter window would hold a call for next to nothing.
MIN_WINDOW_SECONDS = 1.5
# A call ended by an intermediary this soon was not held: the intermediary
# could not reach the server (nginx answers 502 at once), a failure.
MIN_CUT_SECONDS = 1.0
# How far below a learned cut the window goes: a fifth of the interval, at
# most a second less (15 s -> 12 s, 60 s -> 48 s, 3 s -> 2 s).
SHARE_BELOW_CUT = 0.8
# Two cuts belong to one interval when they lie this close (share, or one
# second, whichever is more).
SAME_INTERVAL_SHARE = 0.1
# While shortened, every PROBE_EVERY_CALLS-th call, or the first after
# PROBE_EVERY_SECONDS, tries the full window again.
PROBE_EVERY_CALLS = 50
PROBE_EVERY_SECONDS = 600.0

# grpc's words for an HTTP status an intermediary answered instead of the
# server: "Received http2 header with status: 504".
_HTTP_STATUS = re.compile(r"http2 header with status: (\d{3})")
_CUT_STATUSES = frozenset({502, 503, 504})
# What an intermediary's reset of the connection surfaces as; a reset of
# the stream alone (nginx's read timeout once the server has answered part
# of a stream) is INTERNAL "Received RST_STREAM with error code 2".
_TRANSPORT_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
# Errors that say the server was never reached, or its peer went silent,
# however long they took (a connect timing out, a keepalive ping unanswered):
# failures, never cuts.
_UNREACHED = re.compile(
    r"failed to connect|connection refused|connect(ion)? timed out|dns|resolv|"
    r"name or service|keepalive|ping|handshake|ssl|tls|certificate",
    re.IGNORECASE,
)


def configured_seconds(value: float | None = None) -> float:
    """The window asked for: `value`, else SETU_LONG_POLL_SECONDS, else 55 s."""
    if value is None:
        raw = os.environ.get(ENV_LONG_POLL_SECONDS, "").strip()
        value = float(raw) if raw else DEFAULT_LONG_POLL_SECONDS
    if value < MIN_WINDOW_SECONDS:
        raise ValueError(f"a long-poll window must be at least {MIN_WINDOW_SECONDS:g} s")
    return float(value)


def http_status(details: str) -> int | None:
    """The HTTP status an intermediary answered with, as grpc reports it."""
    found = _HTTP_STATUS.search(details or "")
    return int(found.group(1)) if found else None


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= max(1.0, SAME_INTERVAL_SHARE * max(a, b))


class LongPollWindow:
    """The deadline for the next long-poll to `target`, and what it learns.

    Call `window()` before each call and, after it, `on_answer(held)` when
    the server answered, or `on_error(code, details, held)` when it did not
    (`held`: seconds the call was open; for a stream, since its last
    message). `on_error` says whether the call was cut on its way, to be
    re-issued at once without touching the retry budget, or failed.
    `on_cut(held)` records a cut known as one.

    `now` is a monotonic clock in seconds (the event loop's, in the SDK and
    the runtimes), read only to space the probes.
    """

    def __init__(
        self,
        target: str,
        seconds: float | None = None,
        *,
        now: Callable[[], float] = time.monotonic,
        probe_every_calls: int = PROBE_EVERY_CALLS,
        probe_every_seconds: float = PROBE_EVERY_SECONDS,
    ) -> None:
        self.target = target
        self.ceiling = configured_seconds(seconds)
        self._now = now
        self._probe_calls = probe_every_calls
        self._probe_seconds = probe_every_seconds
        # The learned interval of the cuts, and the window below it.
        self.cut: float | None = None
        self._shortened = self.ceiling
        # A transport error after a long hold, waiting for a second one at
        # the same interval to show it was a cut rather than bad luck.
        self._suspect: float | None = None
        self._calls_since_probe = 0
        self._probed_at = 0.0
        self.cuts = 0  # every cut seen, for tests and benchmarks

    @property
    def shortened(self) -> float:
        """The window calls get between probes: below the cut learned, or
        the configured one when nothing cuts them."""
        return self._shortened

    def window(self) -> float:
        """Seconds to send as the next call's deadline (now and then, while
        shortened, the full one: a probe)."""
        if self.cut is None:
            return self.ceiling
        self._calls_since_probe += 1
        due = self._now() - self._probed_at >= self._probe_seconds
        if due or self._calls_since_probe >= self._probe_calls:
            self._calls_since_probe = 0
            self._probed_at = self._now()
            return self.ceiling
        return self._shortened

    def on_answer(self, held: float) -> None:
        """The server answered after `held` seconds."""
        self._suspect = None
        if self.cut is not None and held > self.cut and not _same(held, self.cut):
            # Held well past the cut: whatever cut the calls does no more.
            log.info(
                f"long-polls to {self.target} are no longer cut; "
                f"waiting {self.ceiling:g} s per call again",
                extra={"target": self.target, "seconds": self.ceiling},
            )
            self.cut = None
            self._shortened = self.ceiling

    def on_cut(self, held: float) -> None:
        """Something between client and server ended a call held `held` seconds."""
        self.cuts += 1
        self._suspect = None
        if self.cut is not None and _same(held, self.cut):
            return  # a probe, or a call sent before the window shortened
        shorter = max(MIN_WINDOW_SECONDS, min(held * SHARE_BELOW_CUT, held - 1.0))
        if shorter >= self.ceiling:
            return  # cut at about the window itself: nothing shorter to learn
        self.cut = held
        self._shortened = shorter
        self._calls_since_probe = 0
        self._probed_at = self._now()
        log.info(
            f"long-polls to {self.target} are cut after ~{held:.0f} s by something in "
            f"between; waiting {shorter:g} s per call from now on",
            extra={"target": self.target, "cut_seconds": round(held, 1), "seconds": shorter},
        )

    def on_error(self, code: grpc.StatusCode, details: str, held: float) -> bool:
        """True when the call was cut on its way (re-issue it at once, it
        spends no retry budget); False when it failed to reach the server."""
        if held < MIN_CUT_SECONDS:
            return False
        status = http_status(details)
        if status is not None:
            if status not in _CUT_STATUSES:
                return False
            self.on_cut(round(held, 1))
            return True
        reset = code is grpc.StatusCode.INTERNAL and "RST_STREAM" in (details or "")
        if (code not in _TRANSPORT_CODES and not reset) or _UNREACHED.search(details or ""):
            return False
        # A reset with no HTTP status: a cut when it comes at the interval
        # already learned, or twice in a row at one interval. Either way the
        # call was held, so the server was reached: not a failure.
        if (self.cut is not None and _same(held, self.cut)) or (
            self._suspect is not None and _same(held, self._suspect)
        ):
            self.on_cut(round(held, 1))
        else:
            self._suspect = held
        return True


def add_long_poll_option(parser: argparse.ArgumentParser) -> None:
    """`--long-poll-seconds` (env SETU_LONG_POLL_SECONDS), for the runtimes' CLIs."""

    def seconds(text: str) -> float:
        try:
            return configured_seconds(float(text))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    raw = os.environ.get(ENV_LONG_POLL_SECONDS, "").strip()
    parser.add_argument(
        "--long-poll-seconds",
        type=seconds,
        default=raw or str(DEFAULT_LONG_POLL_SECONDS),
        help="the longest a lease long-poll is held; shortened by itself below what cuts "
        f"it on the way, such as a proxy's read timeout (env {ENV_LONG_POLL_SECONDS})",
    )
