"""dedupe and aggregate in the spec: parsed, written back, marked blocking,
planned to typed output columns (the SQL agreement is in
tests/integration/test_blocking_sql.py)."""

from __future__ import annotations

from typing import Any

import pytest

from setu_engine.errors import SpecError
from setu_engine.operators.chain import parse_spec
from setu_engine.values.types import Column

COLUMNS = [Column("id", "integer"), Column("name", "text", True, "character varying(20)")]
DEDUPE = {"op": "dedupe", "keys": ["id"], "order_by": "name", "order": "asc"}
AGGREGATE = {
    "op": "aggregate",
    "group_by": ["name"],
    "metrics": {"n": {"count": "*"}, "total": {"sum": "id"}, "top": {"max": "name"}},
}


@pytest.mark.parametrize("op", [DEDUPE, AGGREGATE])
def test_a_spec_round_trips_and_its_chain_is_blocking(op: dict[str, Any]) -> None:
    spec = parse_spec({"operators": [{"op": "rename", "columns": {"id": "id"}}, op]})
    assert parse_spec(spec.to_dict()) == spec
    chain = spec.chain_for("s")
    assert chain.blocking and chain.plan(COLUMNS).blocking
    plain = parse_spec({"operators": [{"op": "drop", "columns": ["name"]}]}).chain_for("s")
    assert not plain.blocking and not plain.plan(COLUMNS).blocking


def test_a_blocking_operator_for_another_stream_leaves_this_one_streaming() -> None:
    spec = parse_spec({"operators": [{**DEDUPE, "streams": ["other"]}]})
    assert not spec.chain_for("s").blocking
    assert spec.chain_for("other").blocking


def test_aggregate_output_columns_and_where_they_come_from() -> None:
    plan = parse_spec({"operators": [AGGREGATE]}).chain_for("s").plan(COLUMNS)
    assert plan.output == (
        Column("name", "text", True, "character varying(20)"),
        Column("n", "bigint", False),
        Column("top", "text", True, "character varying(20)"),
        Column("total", "bigint"),
    )
    assert plan.sources() == ("name", None, None, None)
    assert not plan.identity


def test_dedupe_keeps_the_schema_and_sources() -> None:
    spec = {
        "operators": [{"op": "rename", "columns": {"name": "who"}}, DEDUPE | {"order_by": "who"}]
    }
    plan = parse_spec(spec).chain_for("s").plan(COLUMNS)
    assert [c.name for c in plan.output] == ["id", "who"]
    assert plan.sources() == ("id", "name")


@pytest.mark.parametrize(
    ("op", "message"),
    [
        ({"op": "dedupe"}, r"spec.operators\[0\].keys: must be a non-empty list"),
        ({"op": "dedupe", "keys": ["id"], "order_by": ""}, r"order_by: must be a non-empty name"),
        ({"op": "dedupe", "keys": ["id", "id"]}, r"keys: column 'id' is listed twice"),
        ({"op": "dedupe", "keys": ["id"], "by": "x"}, r"unknown field 'by' for dedupe"),
        ({"op": "aggregate"}, r"spec.operators\[0\].metrics: must be a non-empty object"),
        ({"op": "aggregate", "metrics": {"n": "count"}}, r"metrics.n: must be one of"),
        (
            {"op": "aggregate", "metrics": {"n": {"sum": "*"}}},
            r"metrics.n.sum: \"\*\" is for count only",
        ),
        ({"op": "aggregate", "metrics": {"n": {"avg": "id"}}}, r"unknown metric 'avg'"),
    ],
)
def test_a_bad_shape_names_the_operator_and_field(op: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({"operators": [op]})


@pytest.mark.parametrize(
    ("op", "message"),
    [
        ({"op": "dedupe", "keys": ["x"], "order_by": "id"}, r"\[0\].keys: unknown column 'x'"),
        ({"op": "dedupe", "keys": ["id"], "order_by": "x"}, r"\[0\].order_by: unknown column 'x'"),
        ({"op": "aggregate", "metrics": {"s": {"sum": "name"}}}, r"metrics.s: cannot sum text"),
        ({"op": "aggregate", "metrics": {"s": {"min": "x"}}}, r"metrics.s: unknown column 'x'"),
    ],
)
def test_columns_are_checked_when_planned(op: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({"operators": [op]}).chain_for("s").plan(COLUMNS)
