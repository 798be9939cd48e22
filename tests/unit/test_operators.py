"""parse_spec's structural checks, plan's schema checks and apply's results."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
from decimal import Decimal
from typing import Any

import pytest

from setu_engine.errors import SpecError
from setu_engine.operators.chain import OperatorError, parse_spec
from setu_engine.values.types import Column, Row

USERS = [Column("id", "bigint", False), Column("name", "text"), Column("email", "text")]


def plan(*operators: dict[str, Any], columns: list[Column] = USERS) -> Any:
    return parse_spec({"operators": list(operators)}).chain_for("users").plan(columns)


def apply(rows: list[Row], *operators: dict[str, Any], columns: list[Column] = USERS) -> Any:
    return plan(*operators, columns=columns).apply(rows)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "spec: must be an object"),
        ({"operators": {}}, "spec.operators: must be a list"),
        ({"extra": 1}, "spec: unknown field 'extra'"),
        ({"operators": [1]}, "spec.operators[0]: must be an object"),
        ({"operators": [{"op": "explode"}]}, "spec.operators[0].op: unknown operator 'explode'"),
        (
            {"operators": [{"op": "drop", "columns": ["a"], "x": 1}]},
            "spec.operators[0]: unknown field 'x' for drop",
        ),
        ({"operators": [{"op": "select", "columns": []}]}, "spec.operators[0].columns: must be"),
        (
            {"operators": [{"op": "select", "columns": ["a", "a"]}]},
            "spec.operators[0].columns: column 'a' is listed twice",
        ),
        (
            {"operators": [{"op": "rename", "columns": {"a": 1}}]},
            "spec.operators[0].columns.a: must be a non-empty name",
        ),
        (
            {"operators": [{"op": "cast", "columns": {"a": "money"}}]},
            "spec.operators[0].columns.a: unknown type 'money'",
        ),
        (
            {"operators": [{"op": "filter", "where": "a = = 1"}]},
            "spec.operators[0].where: unexpected '=' at 5",
        ),
        ({"operators": [{"op": "filter"}]}, "spec.operators[0].where: must be a non-empty"),
        (
            {"operators": [{"op": "constant", "column": "c", "value": None}]},
            "spec.operators[0].type: a null constant needs a type",
        ),
        (
            {"operators": [{"op": "constant", "column": "c"}]},
            "spec.operators[0].value: is required",
        ),
        (
            {"operators": [{"op": "constant", "column": "c", "value": "x", "type": "date"}]},
            "spec.operators[0].value: invalid input syntax for type date",
        ),
        (
            {"operators": [{"op": "constant", "column": "c", "value": 1, "type": "date"}]},
            "spec.operators[0].value: a number cannot be a date",
        ),
        (
            {"operators": [{"op": "constant", "column": "c", "value": 70000, "type": "smallint"}]},
            "spec.operators[0].value: smallint out of range",
        ),
        (
            {"operators": [{"op": "mask", "columns": ["a"], "keep": -1}]},
            "spec.operators[0].keep: must be an integer >= 0",
        ),
        (
            {"operators": [{"op": "mask", "columns": ["a"], "char": "**"}]},
            "spec.operators[0].char: must be one character",
        ),
        (
            {"operators": [{"op": "hash", "columns": ["a"], "streams": "users"}]},
            "spec.operators[0].streams: must be a non-empty list",
        ),
        ({"primary_key": {"users": "id"}}, "spec.primary_key.users: must be a non-empty list"),
        ({"primary_key": ["id"]}, "spec.primary_key: must be an object"),
        ({"destination": {"users": ""}}, "spec.destination.users: must be a non-empty name"),
    ],
)
def test_parse_spec_errors_name_the_path(doc: Any, message: str) -> None:
    with pytest.raises(SpecError, match="^" + re.escape(message)):
        parse_spec(doc)


def test_empty_spec_is_an_identity_chain() -> None:
    docs: list[dict[str, Any] | None] = [None, {}, {"operators": []}]
    for doc in docs:
        spec = parse_spec(doc)
        chain = spec.chain_for("users")
        assert chain.empty
        p = chain.plan(USERS)
        assert p.identity and p.output == tuple(USERS)
        rows: list[Row] = [(1, "a", "b")]
        assert p.apply(rows) is rows
        assert (
            p.select_sql('"t"')
            == 'SELECT "id" AS "id", "name" AS "name", "email" AS "email" FROM "t"'
        )


def test_to_dict_round_trips() -> None:
    doc: dict[str, Any] = {
        "operators": [
            {"op": "rename", "columns": {"name": "n"}},
            {"op": "mask", "columns": ["email"], "keep": 2, "char": "#", "streams": ["users"]},
            {"op": "constant", "column": "c", "value": 1.5, "type": "double"},
            {"op": "filter", "where": "id > 1"},
        ],
        "primary_key": {"users": ["id"]},
        "destination": {"public.users": "people"},
    }
    assert parse_spec(parse_spec(doc).to_dict()).to_dict() == parse_spec(doc).to_dict()
    assert parse_spec(doc).to_dict()["operators"][1]["streams"] == ["users"]


@pytest.mark.parametrize(
    ("operators", "message"),
    [
        (
            [{"op": "select", "columns": ["id", "nope"]}],
            "spec.operators[0].columns: unknown column 'nope' (stream has: id, name, email)",
        ),
        (
            [{"op": "rename", "columns": {"name": "email"}}],
            "spec.operators[0].columns: two columns would be named 'email'",
        ),
        (
            [{"op": "drop", "columns": ["id", "name", "email"]}],
            "spec.operators: the chain leaves no columns",
        ),
        (
            [{"op": "constant", "column": "id", "value": 1}],
            "spec.operators[0].column: column 'id' already exists",
        ),
        (
            [{"op": "hash", "columns": ["id"]}],
            "spec.operators[0].columns: hash needs a text column; cast it first",
        ),
        (
            [{"op": "cast", "columns": {"id": "uuid"}}],
            "spec.operators[0].columns.id: cannot cast bigint to uuid",
        ),
        (
            [{"op": "rename", "columns": {"name": "n"}}, {"op": "filter", "where": "name = 'x'"}],
            "spec.operators[1].where: unknown column 'name' at 1",
        ),
        (
            [{"op": "filter", "where": "name > 5"}],
            "spec.operators[0].where: cannot compare text with integer at 6",
        ),
    ],
)
def test_plan_errors_name_the_operator(operators: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(SpecError, match="^" + re.escape(message)):
        plan(*operators)


def test_rename_select_drop_constant() -> None:
    rows: list[Row] = [(1, "Ann", "a@x"), (2, None, None)]
    out = apply(
        rows,
        {"op": "rename", "columns": {"name": "email", "email": "name"}},
        {"op": "drop", "columns": ["id"]},
        {"op": "constant", "column": "src", "value": "crm"},
        {"op": "select", "columns": ["src", "name"]},
    )
    assert out == [("crm", "a@x"), ("crm", None)]
    p = plan({"op": "constant", "column": "n", "value": None, "type": "int"})
    assert p.output[-1] == Column("n", "bigint", True)
    assert plan({"op": "constant", "column": "c", "value": 5}).output[-1].nullable is False


def test_rename_then_filter_then_cast_then_filter() -> None:
    columns = [Column("a", "text"), Column("b", "text")]
    rows: list[Row] = [("10", "2024-01-02"), ("x", "2023-01-01"), ("3", "2024-05-05"), (None, None)]
    out = apply(
        rows,
        {"op": "rename", "columns": {"b": "day"}},
        {"op": "filter", "where": "day >= '2024-01-01'"},
        {"op": "cast", "columns": {"a": "integer", "day": "date"}},
        {"op": "filter", "where": "a > 5 and day < '2024-02-01'"},
        columns=columns,
    )
    assert out == [(10, dt.date(2024, 1, 2))]


def test_casts() -> None:
    columns = [Column("s", "text"), Column("d", "double"), Column("n", "numeric")]
    rows: list[Row] = [("1.50", 2.5, Decimal("-2.5")), ("1e3", 1e20, Decimal("0.5"))]
    out = apply(
        rows,
        {"op": "cast", "columns": {"s": "numeric", "d": "text", "n": "int"}},
        columns=columns,
    )
    assert out == [(Decimal("1.50"), "2.5", -3), (Decimal("1000"), "1e+20", 1)]
    ts = [Column("t", "timestamptz"), Column("u", "uuid"), Column("b", "boolean")]
    aware = dt.datetime(2024, 1, 2, 5, 0, 0, 250000, tzinfo=dt.timezone(dt.timedelta(hours=5)))
    out = apply(
        [(aware, uuid.UUID(int=1), True)],
        {"op": "cast", "columns": {"t": "text", "u": "text", "b": "text"}},
        columns=ts,
    )
    assert out == [("2024-01-02 00:00:00.25+00", "00000000-0000-0000-0000-000000000001", "true")]


def test_uncastable_value_names_column_and_value() -> None:
    match = r"column 'name', row 1: cannot cast to integer .*\(value 'Ann'\)"
    with pytest.raises(OperatorError, match=match):
        apply([(1, "Ann", None)], {"op": "cast", "columns": {"name": "integer"}})


def test_hash_and_mask() -> None:
    rows: list[Row] = [(1, "ümlaut", "+49 151 2345"), (2, None, "ab"), (3, "", "")]
    out = apply(
        rows,
        {"op": "hash", "columns": ["name"]},
        {"op": "mask", "columns": ["email"]},
    )
    assert out[0] == (1, hashlib.sha256("ümlaut".encode()).hexdigest(), "********2345")
    assert out[1] == (2, None, "ab")
    assert out[2] == (3, hashlib.sha256(b"").hexdigest(), "")
    zero = apply([(1, "日本語", None)], {"op": "mask", "columns": ["name"], "keep": 0, "char": "•"})
    assert zero == [(1, "•••", None)]


def test_filters_and_together_and_keep_only_true() -> None:
    rows: list[Row] = [(1, "a", None), (2, None, None), (3, "b", None)]
    out = apply(
        rows,
        {"op": "filter", "where": "name is not null"},
        {"op": "filter", "where": "id > 1"},
    )
    assert out == [(3, "b", None)]
    assert apply(rows, {"op": "filter", "where": "null"}) == []


def test_streams_restriction_and_lookups() -> None:
    spec = parse_spec(
        {
            "operators": [
                {"op": "drop", "columns": ["email"], "streams": ["users"]},
                {"op": "drop", "columns": ["name"], "streams": ["crm.orders"]},
            ],
            "primary_key": {"users": ["id"], "crm.orders": ["order_id"]},
            "destination": {"orders": "all_orders", "crm.orders": "crm_orders"},
        }
    )
    assert [op.index for op in spec.chain_for("users").operators] == [0]
    assert [op.index for op in spec.chain_for("orders", "crm").operators] == [1]
    assert spec.chain_for("orders").empty
    assert spec.primary_key_for("users") == ("id",)
    assert spec.primary_key_for("orders", "crm") == ("order_id",)
    assert spec.primary_key_for("other") is None
    assert spec.destination_for("orders", "crm") == "crm_orders"
    assert spec.destination_for("orders", "shop") == "all_orders"
    assert spec.destination_for("other") == "other"


def test_select_sql_quotes_names_and_orders_filters() -> None:
    columns = [Column('we"ird', "text"), Column("n", "integer")]
    p = plan(
        {"op": "filter", "where": "n <> 0"},
        {"op": "filter", "where": "10 / n > 1"},
        {"op": "rename", "columns": {'we"ird': "o'k"}},
        columns=columns,
    )
    sql = p.select_sql('"stage"')
    assert sql.startswith('SELECT "we""ird" AS "o\'k", "n" AS "n" FROM "stage" WHERE CASE WHEN')
    assert sql.index("<>") < sql.index("/")
    assert p.apply([("a", 0), ("b", 5), ("c", 20)]) == [("b", 5)]
