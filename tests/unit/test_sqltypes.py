"""SQL types kept exactly (setu_engine/values/sqltypes.py): what a catalog, a
SQLite declaration or a spec says is parsed against a whitelist and rendered
back from its parts, so only known names and integers ever reach DDL."""

from __future__ import annotations

import pytest

from setu_engine.errors import SqlTypeError
from setu_engine.kinds import RowChanges
from setu_engine.operators.chain import parse_spec
from setu_engine.values import sqltypes
from setu_engine.values.types import Column
from setu_tasks.results import LoadResult, MalformedResult, result_from_json


@pytest.mark.parametrize(
    ("written", "canonical", "neutral"),
    [
        ("character varying(20)", "character varying(20)", "text"),
        ("VARCHAR (20)", "character varying(20)", "text"),
        ("nvarchar(5)", "character varying(5)", "text"),
        ("char(3)", "character(3)", "text"),
        ("bpchar", "character", "text"),
        ("numeric(5,2)", "numeric(5,2)", "numeric"),
        ("DECIMAL(10, 4)", "numeric(10,4)", "numeric"),
        ("int2", "smallint", "smallint"),
        ("int", "integer", "integer"),
        ("float8", "double precision", "double"),
        ("timestamptz", "timestamp with time zone", "timestamptz"),
        ("timestamp(3) with time zone", "timestamp(3) with time zone", "timestamptz"),
        ("timestamptz(3)", "timestamp(3) with time zone", "timestamptz"),
        ("datetime", "timestamp without time zone", "timestamp"),
        ("time(6)", "time(6) without time zone", "time"),
        ("integer[]", "integer[]", "text"),
        ("character varying(10)[]", "character varying(10)[]", "text"),
        ("numeric(6,2)[]", "numeric(6,2)[]", "text"),
        ("interval", "interval", "text"),
        ("inet", "inet", "text"),
        ("jsonb", "jsonb", "json"),
    ],
)
def test_a_known_type_renders_canonically(written: str, canonical: str, neutral: str) -> None:
    parsed = sqltypes.parse(written)
    assert (parsed.render(), parsed.neutral) == (canonical, neutral)
    assert sqltypes.parse(parsed.render()) == parsed


@pytest.mark.parametrize(
    "hostile",
    [
        "integer); DROP TABLE x; --",
        "text, evil int",
        'public."mood"',
        "mood",
        "int eger",
        "varchar(0)",
        "varchar(99999999999)",
        "text(5)",
        "timestamp(7)",
        "numeric(2,5)",
        "integer[1]; select",
        "x" * 300,
        "",
    ],
)
def test_anything_else_is_refused(hostile: str) -> None:
    with pytest.raises(SqlTypeError):
        sqltypes.parse(hostile)
    assert sqltypes.kept(hostile, "text") == ""


@pytest.mark.parametrize(
    ("reported", "neutral", "kept"),
    [
        ("integer", "integer", ""),  # says no more than the neutral type
        ("timestamp with time zone", "timestamptz", ""),
        ("character varying(20)", "text", "character varying(20)"),
        ("json", "json", "json"),
        ("integer", "bigint", ""),  # holds other values than the column's
        ("mood", "text", ""),  # an enum lands as text
    ],
)
def test_kept_keeps_only_what_says_more(reported: str, neutral: str, kept: str) -> None:
    assert sqltypes.kept(reported, neutral) == kept


def test_a_column_from_a_manifest_refuses_a_sql_type_it_cannot_hold() -> None:
    with pytest.raises(ValueError, match="does not hold"):
        Column.from_dict({"name": "a", "type": "bigint", "sql_type": "varchar(3)"})
    column = Column.from_dict({"name": "a", "type": "text", "sql_type": "VARCHAR(3)"})
    assert column == Column("a", "text", True, "character varying(3)")
    assert Column.from_dict(column.to_dict()) == column
    assert "sql_type" not in Column("a", "text").to_dict()


def test_spec_columns_round_trip_and_plan() -> None:
    spec = parse_spec({"columns": {"public.t": {"a": "VARCHAR(5)", "b": "timestamptz"}}})
    assert parse_spec(spec.to_dict()) == spec
    plan = spec.chain_for("t", "public").plan([Column("a", "text"), Column("b", "text")])
    assert plan.output == (
        Column("a", "text", True, "character varying(5)"),
        Column("b", "timestamptz", True, ""),
    )
    assert not plan.identity
    assert parse_spec({}).chain_for("t").plan([Column("a", "text")]).identity


def test_rename_keeps_a_sql_type_and_hash_drops_it() -> None:
    spec = parse_spec(
        {"operators": [{"op": "rename", "columns": {"a": "b"}}, {"op": "hash", "columns": ["c"]}]}
    )
    plan = spec.chain_for("t").plan(
        [Column("a", "text", True, "character(3)"), Column("c", "text", True, "character(3)")]
    )
    assert plan.output == (Column("b", "text", True, "character(3)"), Column("c", "text"))


def test_load_changes_must_be_counts_of_loaded_streams() -> None:
    good = LoadResult(3, {"s": 3}, {"s": RowChanges(1, 1, 1)})
    assert result_from_json(good.to_json()) == good
    body = good.to_json()
    body["changes_by_stream"]["s"]["updated"] = -1
    with pytest.raises(MalformedResult, match="updated"):
        result_from_json(body)
    body["changes_by_stream"] = {"other": {"inserted": 1, "updated": 0, "unchanged": 0}}
    with pytest.raises(MalformedResult, match="did not load"):
        result_from_json(body)
    body["changes_by_stream"] = {"s": {"inserted": 1, "updated": 0}}
    with pytest.raises(MalformedResult, match="missing"):
        result_from_json(body)
