"""The long-poll window: what counts as a cut, what it learns, when it says
so, and how it probes back up, on a clock the test moves by hand."""

from __future__ import annotations

import argparse
import logging

import grpc
import pytest

from setu_client.long_poll import (
    LongPollWindow,
    add_long_poll_option,
    configured_seconds,
    http_status,
)

U = grpc.StatusCode.UNAVAILABLE
NGINX_504 = "Received http2 header with status: 504"


class Ticks:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def window(seconds: float = 55.0, **kwargs: float) -> tuple[LongPollWindow, Ticks]:
    ticks = Ticks()
    return LongPollWindow("proxy:443", seconds, now=ticks, **kwargs), ticks  # type: ignore[arg-type]


def test_the_configured_window_is_the_deadline_until_a_cut() -> None:
    w, _ = window(40.0)
    assert w.window() == 40.0
    w.on_answer(39.0)
    assert w.window() == 40.0


def test_the_window_comes_from_the_environment_when_not_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SETU_LONG_POLL_SECONDS", "20")
    assert configured_seconds() == 20.0
    assert configured_seconds(7.0) == 7.0
    monkeypatch.delenv("SETU_LONG_POLL_SECONDS")
    assert configured_seconds() == 55.0
    with pytest.raises(ValueError):
        configured_seconds(0.5)


def test_a_proxy_504_after_a_hold_is_a_cut_and_shortens_the_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w, _ = window()
    with caplog.at_level(logging.INFO, "setu.long_poll"):
        assert w.on_error(U, NGINX_504, 15.02) is True
    assert w.cut == 15.0
    assert w.window() == w.shortened == 12.0
    assert caplog.messages == [
        "long-polls to proxy:443 are cut after ~15 s by something in between; "
        "waiting 12 s per call from now on"
    ]


def test_the_cut_is_said_once_however_many_calls_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w, _ = window()
    with caplog.at_level(logging.INFO, "setu.long_poll"):
        for held in (15.0, 15.1, 14.9, 15.3):  # every parked call, cut together
            assert w.on_error(U, NGINX_504, held)
    assert len(caplog.messages) == 1
    assert w.cuts == 4
    assert w.window() == 12.0


def test_an_answer_from_the_intermediary_at_once_is_a_failure() -> None:
    w, _ = window()
    # nginx answers 502 at once when it cannot reach the server.
    assert w.on_error(U, "Received http2 header with status: 502", 0.01) is False
    assert w.on_error(U, "failed to connect to all addresses", 0.2) is False
    assert w.cut is None


def test_other_http_statuses_and_server_errors_are_not_cuts() -> None:
    w, _ = window()
    assert w.on_error(U, "Received http2 header with status: 404", 15.0) is False
    assert w.on_error(grpc.StatusCode.INVALID_ARGUMENT, "bad", 15.0) is False
    assert w.on_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", 55.0) is False
    assert w.cut is None


def test_a_reset_is_learned_only_at_a_consistent_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w, _ = window()
    with caplog.at_level(logging.INFO, "setu.long_poll"):
        # Held, so the server was reached: not a failure, but one reset
        # proves nothing about an interval.
        assert w.on_error(U, "Socket closed", 30.0) is True
        assert w.cut is None and w.window() == 55.0
        assert w.on_error(U, "Connection reset by peer", 30.4) is True
    assert w.cut == 30.4
    assert w.window() == pytest.approx(24.32)
    assert len(caplog.messages) == 1


def test_resets_at_different_intervals_teach_nothing() -> None:
    w, _ = window()
    assert w.on_error(U, "Socket closed", 8.0)
    assert w.on_error(U, "Socket closed", 31.0)
    w.on_answer(20.0)
    assert w.on_error(U, "Socket closed", 31.0)
    assert w.cut is None


def test_a_shorter_cut_later_is_learned_and_said_again(caplog: pytest.LogCaptureFixture) -> None:
    w, _ = window()
    with caplog.at_level(logging.INFO, "setu.long_poll"):
        w.on_error(U, NGINX_504, 30.0)
        w.on_error(U, NGINX_504, 10.0)
    assert w.window() == 8.0
    assert len(caplog.messages) == 2


def test_the_window_never_goes_below_its_floor() -> None:
    w, _ = window()
    w.on_cut(2.0)
    assert w.window() == 1.5


def test_every_so_many_calls_one_tries_the_full_window() -> None:
    w, _ = window(probe_every_calls=5, probe_every_seconds=1e9)
    w.on_cut(15.0)
    windows = [w.window() for _ in range(10)]
    assert windows == [12.0] * 4 + [55.0] + [12.0] * 4 + [55.0]


def test_after_long_enough_the_next_call_tries_the_full_window() -> None:
    w, ticks = window(probe_every_calls=1000, probe_every_seconds=600.0)
    w.on_cut(15.0)
    ticks.now += 599.0
    assert w.window() == 12.0
    ticks.now += 1.0
    assert w.window() == 55.0
    assert w.window() == 12.0  # one probe, then the next one a period later


def test_a_probe_cut_again_keeps_the_window_quietly(caplog: pytest.LogCaptureFixture) -> None:
    w, _ = window(probe_every_calls=2)
    w.on_cut(15.0)
    w.window()
    assert w.window() == 55.0  # the probe
    with caplog.at_level(logging.INFO, "setu.long_poll"):
        assert w.on_error(U, NGINX_504, 15.2)
    assert caplog.messages == []
    assert w.window() == 12.0


def test_a_probe_held_past_the_cut_restores_the_full_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w, _ = window(probe_every_calls=2)
    w.on_cut(15.0)
    w.window()
    assert w.window() == 55.0
    with caplog.at_level(logging.INFO, "setu.long_poll"):
        w.on_answer(54.0)  # the proxy was reconfigured: nothing cut it
    assert w.cut is None
    assert [w.window() for _ in range(3)] == [55.0] * 3
    assert caplog.messages == [
        "long-polls to proxy:443 are no longer cut; waiting 55 s per call again"
    ]


def test_an_early_answer_teaches_nothing() -> None:
    w, _ = window(probe_every_calls=2)
    w.on_cut(15.0)
    w.on_answer(0.3)  # the job ended: the answer came before any cut could
    w.on_answer(12.0)
    assert w.cut == 15.0


def test_http_status_reads_grpcs_words() -> None:
    assert http_status(NGINX_504) == 504
    assert http_status("Received http2 header with status: 503") == 503
    assert http_status("Socket closed") is None
    assert http_status("") is None


def test_a_stream_reset_counts_but_a_server_error_does_not() -> None:
    w, _ = window()
    reset = "Stream removed (RST_STREAM (Received RST_STREAM with error code 2))"
    assert w.on_error(grpc.StatusCode.INTERNAL, reset, 2.0)
    assert w.on_error(grpc.StatusCode.INTERNAL, reset, 2.1)
    assert w.cut == 2.1
    assert not w.on_error(grpc.StatusCode.INTERNAL, "internal error (request id x)", 2.0)


def test_a_server_never_reached_is_a_failure_however_long_it_took() -> None:
    w, _ = window()
    timed_out = "failed to connect to all addresses; last error: UNAVAILABLE: Timeout occurred"
    for _ in range(3):  # a blackholed address: each connect times out at ~20 s
        assert not w.on_error(U, timed_out, 20.0)
        assert not w.on_error(U, "keepalive watchdog timeout", 30.0)
    assert w.cut is None
    assert w.window() == 55.0


def test_the_runtimes_flag_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    def parsed(*argv: str) -> float:
        parser = argparse.ArgumentParser()
        add_long_poll_option(parser)
        seconds: float = parser.parse_args(argv).long_poll_seconds
        return seconds

    monkeypatch.delenv("SETU_LONG_POLL_SECONDS", raising=False)
    assert parsed() == 55.0
    monkeypatch.setenv("SETU_LONG_POLL_SECONDS", "12")
    assert parsed() == 12.0
    assert parsed("--long-poll-seconds", "7") == 7.0
    with pytest.raises(SystemExit):
        parsed("--long-poll-seconds", "0.2")
