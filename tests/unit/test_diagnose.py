"""cause_of reads grpc's texts into a cause, and Outage says an outage once.

The texts below are grpcio 1.85's own, recorded from real connections (a
TLS server with a private CA, a plaintext one, nginx in front of a dead
upstream); tests/e2e/test_tls.py checks the main ones against live servers."""

from __future__ import annotations

import logging

import pytest

from setu_client.diagnose import Outage, cause_of
from setu_client.errors import DeadlineExceeded, Internal, NotFound, SetuError, Unavailable

_LAST = "failed to connect to all addresses; last error: "
RECORDED: list[tuple[str, bool, str]] = [
    (
        _LAST + "UNKNOWN: ipv4:127.0.0.1:36995: Tls handshake failed (TSI_PROTOCOL_FAILURE): "
        "SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: "
        "unable to get local issuer certificate: OK",
        True,
        "not signed by a CA this client trusts",
    ),
    (
        _LAST + "UNKNOWN: ipv4:127.0.0.1:36995: Custom verification check failed with error: "
        "UNAUTHENTICATED: Hostname Verification Check failed.",
        True,
        "does not name this address",
    ),
    (
        _LAST + "UNAVAILABLE: ipv4:127.0.0.1:36995: Socket closed",
        False,
        "plaintext spoken to a TLS port",
    ),
    (
        _LAST + "UNAVAILABLE: ipv4:127.0.0.1:35085: Socket closed",
        True,
        "may require a client certificate",
    ),
    (
        _LAST + "UNKNOWN: ipv4:127.0.0.1:38273: Tls handshake failed (TSI_PROTOCOL_FAILURE): "
        "SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER: "
        "Invalid certificate verification context: OK",
        True,
        "TLS spoken to a plaintext port",
    ),
    (
        _LAST + "UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused",
        False,
        "connection refused",
    ),
    (
        "errors resolving no-such-host.invalid:50051: [field:hostname lookup error:address "
        "lookup failed for no-such-host.invalid:50051: Domain name not found]",
        False,
        "DNS resolution failed",
    ),
    ("DNS resolution failed for no-such-host.invalid:50051", False, "DNS resolution failed"),
    ("Received http2 header with status: 504", False, "answered HTTP 504"),
    ("Received http2 header with status: 502", True, "answered HTTP 502"),
    (
        _LAST + "INTERNAL: ipv4:127.0.0.1:18082: Failed parsing HTTP/2 (Expected SETTINGS frame "
        "as the first frame, got frame type 80) (Trying to connect an http1.x server (HTTP "
        "status 400))",
        False,
        "an HTTP/1 server answered",
    ),
    (
        _LAST + "UNKNOWN: ipv4:10.255.255.1:50051: Failed to connect to remote host: "
        "getsockopt(SO_ERROR): Network is unreachable",
        False,
        "network unreachable",
    ),
    ("Socket closed", False, "the connection was closed"),
]


@pytest.mark.parametrize(("text", "tls", "cause"), RECORDED)
def test_each_recorded_failure_has_its_cause(text: str, tls: bool, cause: str) -> None:
    found = cause_of(Unavailable(text), tls=tls)
    assert found is not None and cause in found


def test_a_proxy_answer_is_a_cause_whatever_code_grpc_gave_it() -> None:
    # grpc maps HTTP 500 to UNKNOWN, 404 to UNIMPLEMENTED: still not the server.
    found = cause_of(SetuError("Received http2 header with status: 500"))
    assert found is not None and "HTTP 500" in found


def test_answers_of_the_server_itself_have_no_cause() -> None:
    assert cause_of(NotFound("job 1 not found")) is None
    assert cause_of(Internal("internal error (request id r-1)")) is None


def test_an_unknown_unavailable_text_is_its_first_line() -> None:
    assert cause_of(Unavailable("the server is stopping\nmore")) == "the server is stopping"
    found = cause_of(DeadlineExceeded("Deadline Exceeded"))
    assert found is not None and "deadline" in found


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records]


def test_an_outage_is_a_warning_once_then_debug_then_reconnected(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="setu.runtime")
    clock = _Clock()
    outage = Outage("edge:50051", clock=clock, remind_seconds=300)
    refused = Unavailable(_LAST + "UNKNOWN: ipv4:127.0.0.1:1: Connection refused")
    outage.reached()  # nothing to say: no outage yet
    for _ in range(5):
        outage.failed(refused, who="setu-agent")
        clock.now += 10
    clock.now += 2.5
    outage.reached(who="setu-agent")
    outage.reached(who="setu-agent")  # said once
    lines = _lines(caplog)
    warnings = [m for level, m in lines if level == logging.WARNING]
    assert warnings == [
        "cannot reach edge:50051: connection refused: nothing listens on that port; backing off"
    ]
    assert sum(level == logging.DEBUG for level, _ in lines) == 4
    assert [m for level, m in lines if level == logging.INFO] == [
        "reconnected to edge:50051 after 52.5 s"
    ]
    record = next(r for r in caplog.records if r.levelno == logging.WARNING)
    assert record.server == "edge:50051" and "refused" in record.cause  # type: ignore[attr-defined]


def test_a_new_cause_or_a_long_outage_is_said_again_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="setu.runtime")
    clock = _Clock()
    outage = Outage("edge:50051", tls=True, clock=clock, remind_seconds=300)
    wrong_ca = Unavailable(_LAST + "UNKNOWN: x: Tls handshake failed: CERTIFICATE_VERIFY_FAILED")
    outage.failed(Unavailable(_LAST + "UNKNOWN: ipv4:127.0.0.1:1: Connection refused"))
    clock.now += 5
    outage.failed(wrong_ca)
    clock.now += 5
    outage.failed(wrong_ca)
    clock.now += 300
    outage.failed(wrong_ca)
    warnings = [m for level, m in _lines(caplog) if level == logging.WARNING]
    assert len(warnings) == 3
    assert "connection refused" in warnings[0]
    assert warnings[1].startswith("still cannot reach edge:50051 after 5 s: TLS handshake failed")
    assert warnings[2].startswith("still cannot reach edge:50051 after 310 s: TLS handshake")
