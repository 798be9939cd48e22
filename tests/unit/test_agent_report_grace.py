"""setu-agent's report grace is a setting (docs/jobs-and-tasks.md): from the
flag or SETU_REPORT_GRACE_SECONDS, with the runtime loop's default."""

from __future__ import annotations

import pytest

from setu_agent.main import parser
from setu_agent.runtime.loop import REPORT_GRACE_SECONDS


def test_the_report_grace_defaults_to_the_runtime_loops() -> None:
    args = parser().parse_args(["--token", "t"])
    assert args.report_grace_seconds == REPORT_GRACE_SECONDS


def test_the_report_grace_comes_from_the_environment_or_the_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SETU_REPORT_GRACE_SECONDS", "3.5")
    assert parser().parse_args([]).report_grace_seconds == 3.5
    flagged = parser().parse_args(["--report-grace-seconds", "7"])
    assert flagged.report_grace_seconds == 7.0
