"""spec.sync parsing, the window a saved cursor gives, and the cursor's trip
through the typed load result (setu_engine/planning/incremental.py, setu_tasks/results.py)."""

from __future__ import annotations

import pytest

from setu_engine.errors import ConfigError, SyncError
from setu_engine.planning import incremental
from setu_engine.planning.incremental import SyncRule, parse_sync, since
from setu_engine.values.types import Column, Stream
from setu_engine.values.window import CursorMark
from setu_tasks.results import LoadResult, MalformedResult

ORDERS = Stream("orders", (Column("id", "bigint"), Column("at", "timestamptz")), "public")


def test_rules_by_stream_with_durations_and_full_left_out() -> None:
    rules = parse_sync(
        {
            "sync": {
                "orders": {"mode": "incremental", "cursor": "at", "lookback": "2h"},
                "events": {"cursor": "id", "lookback": 10},
                "*": "full",
            }
        }
    )
    assert rules == {"orders": SyncRule("at", 7200.0), "events": SyncRule("id", 10.0)}
    assert incremental.rule_for(rules, ORDERS) == SyncRule("at", 7200.0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"mode": "sometimes", "cursor": "id"}, r"spec\.sync\.orders\.mode"),
        ({"mode": "incremental", "cursor": ""}, r"spec\.sync\.orders\.cursor: a column name"),
        ({"cursor": "id", "lookback": "soon"}, r"spec\.sync\.orders\.lookback"),
        ({"cursor": "id", "lookback": -1}, "must not be negative"),
        ({"cursor": "id", "every": 1}, "unknown field 'every'"),
    ],
)
def test_a_bad_rule_names_its_path(value: object, message: str) -> None:
    with pytest.raises(SyncError, match=message):
        parse_sync({"sync": {"orders": value}})


def test_the_window_starts_lookback_behind_the_saved_value() -> None:
    at = Column("at", "timestamptz")
    window = since(SyncRule("at", 3600), at, "2026-01-02 10:00:00+00:00")
    assert window.low == "2026-01-02 09:00:00+00:00" and window.inclusive
    assert since(SyncRule("id", 5), Column("id", "bigint"), "100", False).low == "95"
    assert since(SyncRule("id"), Column("id", "bigint"), None).low is None


def test_a_cursor_must_exist_order_and_never_meet_merge() -> None:
    rules = {"orders": SyncRule("nope")}
    with pytest.raises(ConfigError, match=r"stream orders has no column 'nope'"):
        incremental.check(rules, [ORDERS], merge=False)
    with pytest.raises(ConfigError, match="merge needs a full sync"):
        incremental.check({"orders": SyncRule("id")}, [ORDERS], merge=True)
    shaped = Stream("orders", (Column("doc", "json"),))
    with pytest.raises(ConfigError, match="type json, which a cursor cannot follow"):
        incremental.check({"orders": SyncRule("doc")}, [shaped], merge=False)


def test_a_load_result_carries_each_streams_cursor() -> None:
    mark = CursorMark("at", "timestamptz", "2026-01-02 10:00:00+00:00")
    result = LoadResult(3, {"public.orders": 3}, cursors_by_stream={"public.orders": mark})
    again = LoadResult.from_json(result.to_json())
    assert again.cursors_by_stream == {"public.orders": mark}
    stray = LoadResult(3, {"public.orders": 3}, cursors_by_stream={"other": mark})
    with pytest.raises(MalformedResult, match="cursor of 'other'"):
        stray.validate()


def test_a_rule_without_a_cursor_is_by_object_and_a_table_stream_needs_one() -> None:
    rules = parse_sync({"sync": {"orders": "incremental", "events": {"mode": "incremental"}}})
    assert rules == {"orders": SyncRule(""), "events": SyncRule("")}
    incremental.check(rules, [ORDERS], merge=False)  # a file stream, maybe: known at run time
    with pytest.raises(ConfigError, match=r"orders\.cursor: required for an incremental stream"):
        incremental.cursor_column(ORDERS, rules["orders"])


def test_a_file_stream_is_read_when_its_object_is_new_or_changed() -> None:
    rule = SyncRule("")
    now = incremental.object_mark({"a.csv": ("etag1:10", "2026-01-02 10:00:00+00:00")})
    first = incremental.object_window(rule, ORDERS, None, now)
    assert first.low is None and not first.empty and first.mark is not None
    assert first.mark.type == "files" and first.describe().endswith("first read (1 file)")
    same = incremental.object_window(rule, ORDERS, now, now)
    assert same.empty and "unchanged since the last run" in same.describe()
    changed = incremental.object_mark({"a.csv": ("etag2:11", "2026-01-02 11:00:00+00:00")})
    later = incremental.object_window(rule, ORDERS, now, changed)
    assert not later.empty and later.describe().endswith("1 new or changed of 1 file")
    assert incremental.objects_of(changed) == {"a.csv": "etag2:11"}
    with pytest.raises(
        ConfigError, match=r"orders\.cursor: a file stream is incremental by object"
    ):
        incremental.object_window(SyncRule("id"), ORDERS, None, now)
