"""The monitor's pure parts: sessions and CSRF tokens, the 24-hour chart,
configs as pages show them, addresses, and where sign-in may send you."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from setu_server.config import Settings
from setu_server.models import Job, JobKind, JobState
from setu_server.web.actions import _local_path
from setu_server.web.chart import hours, short_count, svg
from setu_server.web.listener import split_address
from setu_server.web.reads import shown_config
from setu_server.web.session import LIFETIME, SessionSigner

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
WS, KEY = uuid.uuid4(), uuid.uuid4()


def test_a_session_reads_back_only_as_signed_and_until_it_expires() -> None:
    signer = SessionSigner("")
    cookie, session = signer.issue(WS, KEY, NOW)
    body, _, signature = cookie.partition(".")
    forged_body = body[:-2] + ("AA" if body[-2:] != "AA" else "BB")

    assert signer.read(cookie, NOW) == session
    assert (session.workspace_id, session.credential_id) == (WS, KEY)
    assert signer.read(cookie, NOW + LIFETIME) is None
    assert signer.read(f"{forged_body}.{signature}", NOW) is None
    assert signer.read(f"{body}.", NOW) is None
    assert signer.read("garbage", NOW) is None and signer.read(None, NOW) is None
    assert SessionSigner("").read(cookie, NOW) is None  # another process's key


def test_replicas_sharing_the_page_token_key_accept_each_others_sessions() -> None:
    one, two = SessionSigner("shared-key"), SessionSigner("shared-key")
    cookie, session = one.issue(WS, KEY, NOW)

    assert two.read(cookie, NOW) == session
    assert two.csrf_ok(session, one.csrf_token(session))
    assert SessionSigner("other-key").read(cookie, NOW) is None


def test_a_csrf_token_belongs_to_its_session() -> None:
    signer = SessionSigner("")
    _, mine = signer.issue(WS, KEY, NOW)
    _, theirs = signer.issue(WS, KEY, NOW)

    assert signer.csrf_ok(mine, signer.csrf_token(mine))
    assert not signer.csrf_ok(mine, signer.csrf_token(theirs))
    assert not signer.csrf_ok(mine, "")


def _run(created: datetime, seconds: float | None, rows: int) -> Job:
    started = created + timedelta(seconds=1)
    return Job(
        id=uuid.uuid4(),
        workspace_id=WS,
        kind=JobKind.RUN,
        state=JobState.SUCCEEDED if seconds is not None else JobState.RUNNING,
        version=1,
        created_at=created,
        updated_at=created,
        rows_loaded=rows,
        started_at=started,
        finished_at=started + timedelta(seconds=seconds) if seconds is not None else None,
    )


def test_the_chart_sums_rows_and_keeps_the_longest_run_of_each_hour() -> None:
    since = NOW - timedelta(hours=23)
    jobs = [
        _run(since + timedelta(minutes=5), 30, 100),
        _run(since + timedelta(minutes=50), 90, 20),
        _run(since + timedelta(hours=5), None, 7),  # still running: rows, no duration
        _run(since - timedelta(minutes=1), 999, 10_000),  # before the window
    ]
    day = hours(jobs, since)

    assert len(day) == 24
    assert (day[0].runs, day[0].rows, day[0].longest) == (2, 120, 90.0)
    assert (day[5].runs, day[5].rows, day[5].longest) == (1, 7, 0.0)
    assert sum(h.runs for h in day) == 3
    drawn = svg(day)
    assert drawn.count('<rect class="bar"') == 24
    assert drawn.count('<circle class="dot"') == 1
    assert "2 run(s), 120 rows loaded, longest 1 min 30 s" in drawn


@pytest.mark.parametrize(
    ("rows", "shown"),
    [(0, "0"), (950, "950"), (45_210, "45.2k"), (999_600, "1M"), (1_071_880, "1.07M")],
)
def test_the_charts_axis_counts_are_short(rows: int, shown: str) -> None:
    assert short_count(rows) == shown


def test_configs_show_references_by_name_and_never_a_plain_credential() -> None:
    shown = shown_config(
        {
            "host": "db",
            "password": {"$secret": "PG_PW"},
            "auth": {"api_token": "plain-token", "user": "u"},
        }
    )

    assert shown == [
        ("auth.api_token", "•••• (a plain value: use a secret reference)", False),
        ("auth.user", "u", False),
        ("host", "db", False),
        ("password", "secret PG_PW", True),
    ]


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("/runs/1?state=failed", "/runs/1?state=failed"),
        ("https://evil.example/", ""),
        ("//evil.example/", ""),
        ("/\\evil.example", ""),
        ("", ""),
    ],
)
def test_sign_in_sends_you_back_only_within_the_monitor(given: str, kept: str) -> None:
    assert _local_path(given) == kept


def test_the_http_address_is_host_and_port_and_may_be_turned_off() -> None:
    assert split_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert split_address("[::1]:8080") == ("::1", 8080)
    assert split_address(":8080") == ("0.0.0.0", 8080)
    with pytest.raises(SystemExit, match="SETU_HTTP_LISTEN wants host:port"):
        split_address("localhost")
    assert Settings.from_env({}).http_listen == "127.0.0.1:8080"
    assert Settings.from_env({"SETU_HTTP_LISTEN": ""}).http_listen == ""
    assert Settings.from_env({"SETU_LISTEN": ""}).listen == replace(Settings()).listen
