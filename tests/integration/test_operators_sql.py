"""The same chain run both ways against real PostgreSQL: the Python `apply`
and the compiled `select_sql` must give identical rows, NULLs included."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import asyncpg
import pytest

from setu_engine.errors import OperatorError
from setu_engine.filters.expr_compile import quote_ident
from setu_engine.operators.chain import Plan, parse_spec
from setu_engine.values.types import PG_TYPES, Column, Row

UTC = dt.UTC


def cols(*spec: str) -> list[Column]:
    return [Column(name, type_) for name, type_ in (item.split(":") for item in spec)]


def ops(*operators: dict[str, Any]) -> dict[str, Any]:
    return {"operators": list(operators)}


TEXTS = ["12", "-7", "+3", " 4", "1.5", "abc", "", None]
NUMBERS_TEXT = ["1.5", "-2.50", "1e3", "1E-7", ".5", "2.", "x", None]
CASES: list[tuple[str, list[Column], list[Row], dict[str, Any]]] = [
    (
        "rename select drop constant",
        cols("id:bigint", "name:text", "junk:text"),
        [(1, "a", "x"), (2, None, None)],
        ops(
            {"op": "rename", "columns": {"name": "full name"}},
            {"op": "drop", "columns": ["junk"]},
            {"op": "constant", "column": "src", "value": "it's \\ crm"},
            {"op": "constant", "column": "n", "value": None, "type": "numeric"},
            {
                "op": "constant",
                "column": "at",
                "value": "2024-02-03 04:05:06.5+02:00",
                "type": "timestamptz",
            },
            {"op": "constant", "column": "doc", "value": {"b": [1, 2.5, 1e20], "a": None}},
            {"op": "constant", "column": "f", "value": 0.1},
            {"op": "select", "columns": ["full name", "id", "src", "n", "at", "doc", "f"]},
        ),
    ),
    (
        "text to integers",
        cols("s:text"),
        [(t,) for t in ["12", "-7", "+3", "0", None]],
        ops({"op": "cast", "columns": {"s": "smallint"}}),
    ),
    (
        "text to numbers",
        cols("a:text", "b:text", "c:text"),
        [(t, t, t) for t in ["1.5", "-2.50", "1e3", "1E-7", ".5", "2.", "0.1", None]],
        ops({"op": "cast", "columns": {"a": "numeric", "b": "double", "c": "real"}}),
    ),
    (
        "text to other types",
        cols("b:text", "d:text", "t:text", "ts:text", "tz:text", "u:text", "j:text"),
        [
            (
                "yes",
                "2024-02-29",
                "23:59:59.25",
                "2024-01-01 10:00",
                "2024-01-01T10:00:00Z",
                "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
                '{"b": 1, "a": [true, null, "é"]}',
            ),
            (
                " off ",
                "1999-12-31",
                "00:00",
                "2024-01-01T10:00:00.123456",
                "2024-06-01 10:00:00.5-0130",
                "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
                "[1.50, 2]",
            ),
            ("T", None, None, "2024-01-01", "2024-01-01 10:00", None, '"x"'),
            (None, None, None, None, "2024-01-01 23:30+05", None, None),
        ],
        ops(
            {
                "op": "cast",
                "columns": {
                    "b": "boolean",
                    "d": "date",
                    "t": "time",
                    "ts": "timestamp",
                    "tz": "timestamptz",
                    "u": "uuid",
                    "j": "json",
                },
            }
        ),
    ),
    (
        "numbers round to integers",
        cols("n:numeric", "d:double", "r:real"),
        [(Decimal(v), float(v), float(v)) for v in ["2.5", "3.5", "-2.5", "-0.5", "0.49"]]
        + [(None, None, None)],
        ops({"op": "cast", "columns": {"n": "integer", "d": "bigint", "r": "smallint"}}),
    ),
    (
        "numbers to numbers",
        cols("i:integer", "d:double", "n:numeric", "r:real"),
        [
            (7, 1 / 3, Decimal("1.25"), 0.1),
            (-1, 1e20, Decimal("-0.000001"), 1e-5),
            (0, float("nan"), Decimal("NaN"), float("inf")),
            (None, None, None, None),
        ],
        ops(
            {"op": "cast", "columns": {"i": "real", "d": "numeric", "n": "double", "r": "numeric"}}
        ),
    ),
    (
        "everything to text",
        cols(
            "b:boolean",
            "i:bigint",
            "r:real",
            "d:double",
            "n:numeric",
            "y:bytes",
            "dt:date",
            "t:time",
            "ts:timestamp",
            "tz:timestamptz",
            "u:uuid",
            "j:json",
        ),
        [
            (
                True,
                -5,
                0.1,
                0.1,
                Decimal("1.50"),
                b"\x00\xffa",
                dt.date(2024, 1, 2),
                dt.time(1, 2, 3, 500000),
                dt.datetime(2024, 1, 2, 3, 4, 5, 120000),
                dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=5))),
                uuid.UUID(int=255),
                {"bb": 1.0, "a": [1e20, "x\n\u00e9"], "c": None},
            ),
            (
                False,
                0,
                1e7,
                1e15,
                Decimal("-0.0000001"),
                b"",
                dt.date(1000, 1, 1),
                dt.time(0, 0),
                dt.datetime(2024, 1, 2),
                dt.datetime(2024, 1, 2, tzinfo=UTC),
                uuid.UUID(int=0),
                [1, 2.5],
            ),
            (
                None,
                None,
                123456.0,
                1e-5,
                Decimal("1E+3"),
                None,
                None,
                None,
                None,
                None,
                None,
                "str",
            ),
            (
                None,
                None,
                float("inf"),
                float("nan"),
                Decimal("NaN"),
                None,
                None,
                None,
                None,
                None,
                None,
                None,
            ),
            (
                None,
                None,
                -0.0,
                1.2345678901234568e17,
                Decimal(0),
                None,
                None,
                None,
                None,
                None,
                None,
                1e-7,
            ),
        ],
        ops(
            {
                "op": "cast",
                "columns": {
                    k: "text"
                    for k in ["b", "i", "r", "d", "n", "y", "dt", "t", "ts", "tz", "u", "j"]
                },
            }
        ),
    ),
    (
        "dates and timestamps",
        cols("d:date", "ts:timestamp", "tz:timestamptz", "d2:date"),
        [
            (
                dt.date(2024, 3, 1),
                dt.datetime(2024, 3, 1, 23, 0),
                dt.datetime(2024, 3, 1, 23, 0, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
                dt.date(2020, 1, 1),
            ),
            (None, None, None, None),
        ],
        ops(
            {
                "op": "cast",
                "columns": {
                    "d": "timestamptz",
                    "ts": "timestamptz",
                    "tz": "timestamp",
                    "d2": "timestamp",
                },
            }
        ),
    ),
    (
        "hash and mask unicode",
        cols("e:text", "p:text", "q:text"),
        [
            ("ümlaut@example.com", "+49 151 2345", "ab"),
            ("", "", "日本語テキスト"),
            (None, None, None),
            ("a", "1234", "x"),
        ],
        ops(
            {"op": "hash", "columns": ["e"]},
            {"op": "mask", "columns": ["p"]},
            {"op": "mask", "columns": ["q"], "keep": 0, "char": "•"},
        ),
    ),
    (
        "filter three-valued logic",
        cols("a:integer", "b:boolean", "s:text"),
        [(a, b, s) for a in (1, 5, None) for b in (True, False, None) for s in ("x", "Y", None)],
        ops({"op": "filter", "where": "(a > 2 or b) and not (s = 'x' and b is null)"}),
    ),
    (
        "filter in, between, null, text order",
        cols("a:integer", "s:text", "n:numeric"),
        [
            (1, "apple", Decimal("1.5")),
            (2, "Banana", Decimal("NaN")),
            (3, None, None),
            (None, "Zebra", Decimal("10")),
            (4, "éclair", Decimal("-3")),
        ],
        ops(
            {
                "op": "filter",
                "where": "a not in (2, null) or s < 'b' or n between 1 and 2 "
                "or n > 1000 or s in ('Zebra', null)",
            }
        ),
    ),
    (
        "filter arithmetic",
        cols("a:integer", "b:smallint", "d:double", "n:numeric"),
        [
            (7, 2, 1.5, Decimal("10")),
            (-7, 2, -0.5, Decimal("3")),
            (10, -3, 0.0, Decimal("0.3")),
            (None, 1, None, None),
        ],
        ops(
            {
                "op": "filter",
                "where": "a / b = -3 or a % b = -1 or -d * 2 > 0.5 "
                "or n / 3 = 1 or n / 3 > 0.1 and n % 0.2 = 0.1 or a + 0.5 = 10.5",
            }
        ),
    ),
    (
        "rename then filter, cast then filter, dates",
        cols("when:text", "amount:text", "status:text"),
        [
            ("2024-01-05", "150", "ok"),
            ("2023-12-31", "500", "ok"),
            ("2024-02-01", "99", "ok"),
            ("2024-03-01", "1000", "void"),
            ("2024-03-01", "nope", "void"),
            (None, None, None),
        ],
        ops(
            {"op": "rename", "columns": {"when": "day"}},
            {"op": "filter", "where": "status != 'void'"},
            {"op": "cast", "columns": {"day": "date", "amount": "bigint"}},
            {"op": "filter", "where": "day >= '2024-01-01' and amount > 100"},
        ),
    ),
    (
        "filter timestamps and uuid literals",
        cols("t:timestamptz", "u:uuid"),
        [
            (dt.datetime(2024, 1, 1, 1, tzinfo=UTC), uuid.UUID(int=1)),
            (dt.datetime(2023, 12, 31, 23, tzinfo=UTC), uuid.UUID(int=2)),
        ],
        ops(
            {
                "op": "filter",
                "where": "t >= '2024-01-01' or u = '00000000-0000-0000-0000-000000000002'",
            }
        ),
    ),
]


async def run_sql(pool: asyncpg.Pool, plan: Plan, rows: list[Row]) -> list[Row]:
    ddl = ", ".join(f"{quote_ident(c.name)} {PG_TYPES[c.type]}" for c in plan.input)
    marks = ", ".join(f"${i + 1}" for i in range(len(plan.input)))
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(f'CREATE TEMP TABLE "tmp" ({ddl}) ON COMMIT DROP')
        await conn.executemany(f'INSERT INTO "tmp" VALUES ({marks})', rows)
        return [tuple(r) for r in await conn.fetch(plan.select_sql('"tmp"'))]


def scale(d: Decimal) -> int:
    exponent = d.as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and a != a:
        return b != b
    if isinstance(a, Decimal) and isinstance(b, Decimal) and a.is_nan():
        return b.is_nan()
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        # asyncpg may spell 10**20 as 1E+20: compare value and display scale.
        return a == b and scale(a) == scale(b)
    if isinstance(a, uuid.UUID):
        return str(a) == str(b)
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return a == b and (a.tzinfo is None) == (b.tzinfo is None)
    return type(a) is type(b) and a == b if not isinstance(a, dict | list) else a == b


@pytest.mark.parametrize(
    ("columns", "rows", "spec"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
async def test_python_and_sql_agree(
    pool: asyncpg.Pool, columns: list[Column], rows: list[Row], spec: dict[str, Any]
) -> None:
    plan = parse_spec(spec).chain_for("s").plan(columns)
    expected = await run_sql(pool, plan, rows)
    got = plan.apply(rows)
    assert len(got) == len(expected), (got, expected)
    for py_row, sql_row in zip(got, expected, strict=True):
        diffs = [(a, b) for a, b in zip(py_row, sql_row, strict=True) if not same(a, b)]
        assert not diffs, f"python != sql: {diffs}"
    assert expected, "a case whose rows all vanish proves little"


FAILING: list[tuple[str, list[Column], list[Row], dict[str, Any]]] = [
    (
        "not an integer",
        cols("s:text"),
        [("12",), ("1_000",)],
        ops({"op": "cast", "columns": {"s": "integer"}}),
    ),
    ("hex integer", cols("s:text"), [("0x1F",)], ops({"op": "cast", "columns": {"s": "integer"}})),
    (
        "smallint overflow",
        cols("s:text"),
        [("40000",)],
        ops({"op": "cast", "columns": {"s": "smallint"}}),
    ),
    ("date words", cols("s:text"), [("today",)], ops({"op": "cast", "columns": {"s": "date"}})),
    ("bad date", cols("s:text"), [("2023-02-29",)], ops({"op": "cast", "columns": {"s": "date"}})),
    ("bad bool", cols("s:text"), [("maybe",)], ops({"op": "cast", "columns": {"s": "boolean"}})),
    ("bad json", cols("s:text"), [("{nope",)], ops({"op": "cast", "columns": {"s": "json"}})),
    (
        "nan to int",
        cols("d:double"),
        [(float("nan"),)],
        ops({"op": "cast", "columns": {"d": "integer"}}),
    ),
    (
        "double overflow to real",
        cols("d:double"),
        [(1e300,)],
        ops({"op": "cast", "columns": {"d": "real"}}),
    ),
    (
        "division by zero",
        cols("a:integer", "b:integer"),
        [(1, 0)],
        ops({"op": "filter", "where": "a / b > 0"}),
    ),
    (
        "integer overflow",
        cols("a:integer"),
        [(2**31 - 1,)],
        ops({"op": "filter", "where": "a + 1 > 0"}),
    ),
    (
        "cast in a filter",
        cols("a:text"),
        [("x",)],
        ops({"op": "cast", "columns": {"a": "numeric"}}, {"op": "filter", "where": "a > 1"}),
    ),
]


@pytest.mark.parametrize(
    ("columns", "rows", "spec"), [c[1:] for c in FAILING], ids=[c[0] for c in FAILING]
)
async def test_both_refuse_the_same_value(
    pool: asyncpg.Pool, columns: list[Column], rows: list[Row], spec: dict[str, Any]
) -> None:
    plan = parse_spec(spec).chain_for("s").plan(columns)
    with pytest.raises(OperatorError):
        plan.apply(rows)
    with pytest.raises(asyncpg.PostgresError):
        await run_sql(pool, plan, rows)


async def test_rows_filtered_out_before_a_failing_cast_raise_in_neither(
    pool: asyncpg.Pool,
) -> None:
    spec = ops({"op": "cast", "columns": {"a": "integer"}}, {"op": "filter", "where": "ok"})
    plan = parse_spec(spec).chain_for("s").plan(cols("a:text", "ok:boolean"))
    rows: list[Row] = [("x", False), ("5", True)]
    assert plan.apply(rows) == [(5, True)]
    assert await run_sql(pool, plan, rows) == [(5, True)]
