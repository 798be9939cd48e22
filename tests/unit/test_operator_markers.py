"""Operators over the values Python's types cannot hold (setu_engine/values/special.py):
±infinity of dates and timestamps, and JSON's null. Each operator takes
them without an unexpected exception; a comparison orders infinity after
(before) every date; a cast keeps or spells them as PostgreSQL does; a row
the chain cannot process is a permanent fault naming its column and row."""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import pytest

from setu_engine.errors import OperatorError, RowFault
from setu_engine.operators.chain import parse_spec
from setu_engine.values.special import INFINITY, JSON_NULL, MINUS_INFINITY
from setu_engine.values.types import Column, Row

UTC = dt.UTC
COLUMNS = [
    Column("id", "bigint", False),
    Column("d", "date"),
    Column("ts", "timestamp"),
    Column("tz", "timestamptz"),
    Column("j", "json"),
    Column("t", "text"),
]
ROWS: list[Row] = [
    (1, INFINITY, INFINITY, INFINITY, JSON_NULL, "infinity"),
    (2, MINUS_INFINITY, MINUS_INFINITY, MINUS_INFINITY, {"a": None}, "-infinity"),
    (
        3,
        dt.date(2021, 1, 1),
        dt.datetime(2021, 1, 1),
        dt.datetime(2021, 1, 1, tzinfo=UTC),
        None,
        None,
    ),
]


def apply(*operators: dict[str, Any], rows: list[Row] = ROWS) -> list[Row]:
    plan = parse_spec({"operators": list(operators)}).chain_for("s").plan(COLUMNS)
    return list(plan.apply(rows))


def ids(rows: list[Row]) -> list[int]:
    return [row[0] for row in rows]


@pytest.mark.parametrize("column", ["d", "ts", "tz"])
def test_infinity_compares_after_every_date(column: str) -> None:
    assert ids(apply({"op": "filter", "where": f"{column} > '2020-01-01'"})) == [1, 3]
    assert ids(apply({"op": "filter", "where": f"{column} < '2020-01-01'"})) == [2]
    assert ids(apply({"op": "filter", "where": f"{column} >= '9999-12-31'"})) == [1]
    assert ids(apply({"op": "filter", "where": f"{column} = 'infinity'"})) == [1]
    assert ids(apply({"op": "filter", "where": f"{column} <> '-infinity'"})) == [1, 3]
    where = f"{column} between '-infinity' and '2030-01-01'"
    assert ids(apply({"op": "filter", "where": where})) == [2, 3]
    assert ids(apply({"op": "filter", "where": f"{column} in ('infinity', '2021-01-01')"})) == [
        1,
        3,
    ]


def test_a_cast_to_text_spells_infinity_as_postgresql_does() -> None:
    out = apply({"op": "cast", "columns": {"d": "text", "ts": "text", "tz": "text"}})
    assert [row[1:4] for row in out] == [
        ("infinity",) * 3,
        ("-infinity",) * 3,
        ("2021-01-01", "2021-01-01 00:00:00", "2021-01-01 00:00:00+00"),
    ]


@pytest.mark.parametrize(
    ("column", "to"),
    [
        ("d", "timestamp"),
        ("d", "timestamptz"),
        ("ts", "date"),
        ("ts", "timestamptz"),
        ("tz", "date"),
        ("tz", "timestamp"),
    ],
)
def test_casts_between_dates_and_timestamps_keep_infinity(column: str, to: str) -> None:
    out = apply({"op": "cast", "columns": {column: to}})
    at = [c.name for c in COLUMNS].index(column)
    assert [row[at] for row in out[:2]] == [INFINITY, MINUS_INFINITY]


def test_text_reads_infinity_as_a_date_or_timestamp() -> None:
    out = apply({"op": "cast", "columns": {"t": "timestamptz"}})
    assert [row[5] for row in out] == [INFINITY, MINUS_INFINITY, None]
    constant = {"op": "constant", "column": "c", "value": "-infinity", "type": "date"}
    assert {row[-1] for row in apply(constant)} == {MINUS_INFINITY}


def test_a_cast_that_cannot_hold_infinity_fails_naming_column_and_row() -> None:
    """timestamp → time: infinity has no time of day. The row is counted
    from the stream's start, across batches."""
    plan = parse_spec({"operators": [{"op": "cast", "columns": {"ts": "time"}}]})
    running = plan.chain_for("s").plan(COLUMNS)
    assert running.apply([ROWS[2], ROWS[2]])[0][2] == dt.time(0, 0)
    with pytest.raises(RowFault) as caught:
        running.apply([ROWS[2], ROWS[0]])
    fault = caught.value
    assert (fault.column, fault.row, fault.value) == ("ts", 4, INFINITY)
    assert fault.retryable is False
    assert "column 'ts', row 4: cannot cast to time (infinity has no time of day)" in str(fault)


def test_json_null_is_a_value_not_sql_null() -> None:
    assert ids(apply({"op": "filter", "where": "j is null"})) == [3]
    assert ids(apply({"op": "filter", "where": "j is not null"})) == [1, 2]
    out = apply({"op": "cast", "columns": {"j": "text"}})
    assert [row[4] for row in out] == ["null", '{"a": null}', None]
    back = apply({"op": "cast", "columns": {"j": "text"}}, {"op": "cast", "columns": {"j": "json"}})
    assert [row[4] for row in back] == [JSON_NULL, {"a": None}, None]


def test_hash_mask_rename_and_select_take_the_markers() -> None:
    out = apply(
        {"op": "cast", "columns": {"d": "text", "j": "text"}},
        {"op": "hash", "columns": ["d"]},
        {"op": "mask", "columns": ["j"], "keep": 2},
        {"op": "rename", "columns": {"tz": "at"}},
        {"op": "select", "columns": ["id", "d", "j", "at"]},
    )
    assert out[0] == (1, hashlib.sha256(b"infinity").hexdigest(), "**ll", INFINITY)
    assert out[1][3] is MINUS_INFINITY


def test_a_row_an_expression_cannot_process_is_a_located_fault() -> None:
    columns = [Column("a", "integer"), Column("b", "integer")]
    plan = parse_spec({"operators": [{"op": "filter", "where": "a / b > 0"}]}).chain_for("s")
    running = plan.plan(columns)
    with pytest.raises(OperatorError) as caught:
        running.apply([(1, 1), (2, 0)])
    assert isinstance(caught.value, RowFault)
    assert (caught.value.row, caught.value.value) == (2, (2, 0))
    assert "division by zero" in str(caught.value)
