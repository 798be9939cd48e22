"""Who is online: the window derived from the lease settings, and the rule."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from setu_server.models import DEFAULT_PRESENCE_WINDOW, Agent
from setu_server.service.agents import presence_window

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _agent(seen_ago: float | None = 0.0, *, active: bool = True, signed_off: bool = False) -> Agent:
    return Agent(
        id=uuid.uuid4(),
        workspace_id=uuid.uuid4(),
        name="edge",
        active=active,
        version="",
        capabilities=[],
        hostname="",
        last_seen_at=None if seen_ago is None else NOW - timedelta(seconds=seen_ago),
        created_at=NOW - timedelta(days=1),
        signed_off_at=NOW if signed_off else None,
    )


def test_the_window_is_the_longest_quiet_of_a_live_agent_plus_a_grace() -> None:
    # An idle slot calls once per long-poll cap; a busy one heartbeats every TTL/3.
    assert presence_window(30, 60) == timedelta(seconds=45) == DEFAULT_PRESENCE_WINDOW
    assert presence_window(10, 60) == timedelta(seconds=35)
    assert presence_window(30, 180) == timedelta(seconds=75)


def test_seen_within_the_window_is_online_and_beyond_it_is_not() -> None:
    window = timedelta(seconds=45)
    assert _agent(45).online(NOW, window)
    assert not _agent(45.001).online(NOW, window)
    assert not _agent(None).online(NOW, window), "never seen"


def test_a_parked_lease_is_online_however_long_ago_the_last_write() -> None:
    assert _agent(3600).online(NOW, timedelta(seconds=45), parked=True)
    assert _agent(None).online(NOW, timedelta(seconds=45), parked=True)


def test_signed_off_or_deactivated_is_offline_even_when_just_seen_or_parked() -> None:
    window = timedelta(seconds=45)
    assert not _agent(0, signed_off=True).online(NOW, window, parked=True)
    assert not _agent(0, active=False).online(NOW, window, parked=True)
