"""A run's staging prefix: spelled once (run_prefix), and recognised by the
janitor (is_run_prefix) under whichever pipeline, never beyond the run."""

from __future__ import annotations

import pytest

from setu_engine.staged.staging import is_run_prefix, run_prefix


def test_a_runs_own_prefix_is_recognised_under_any_pipeline() -> None:
    assert run_prefix("w", "p", "r") == "ws/w/pl/p/run/r/"
    assert is_run_prefix(run_prefix("w", "p", "r"), "w", "r")
    assert is_run_prefix(run_prefix("w", "deleted-pipeline", "r"), "w", "r")


@pytest.mark.parametrize(
    "prefix",
    [
        "ws/w/pl/p/run/other/",  # another run
        "ws/x/pl/p/run/r/",  # another workspace
        "ws/w/pl//run/r/",  # no pipeline
        "ws/w/pl/a/b/run/r/",  # deeper than a run
        "ws/w/pl/../run/r/",
        "ws/w/pl/p/run/r/users/",  # inside the run, not the run
        "ws/w/",
    ],
)
def test_anything_else_is_not_the_runs_prefix(prefix: str) -> None:
    assert not is_run_prefix(prefix, "w", "r")
