"""±infinity through a chain both ways against real PostgreSQL: the Python
`apply` and the compiled `select_sql` give the same rows (compared as
PostgreSQL's text, since asyncpg clamps an infinity), and both refuse a cast
that cannot hold one."""

from __future__ import annotations

import datetime as dt
from typing import Any

import asyncpg
import pytest

from setu_engine.errors import RowFault
from setu_engine.filters.expr_compile import quote_ident
from setu_engine.operators.casts import TEXT_OUT
from setu_engine.operators.chain import Plan, parse_spec
from setu_engine.values.special import INFINITY, MINUS_INFINITY
from setu_engine.values.types import PG_TYPES, Column, Row

COLUMNS = [
    Column("id", "bigint"),
    Column("d", "date"),
    Column("ts", "timestamp"),
    Column("tz", "timestamptz"),
    Column("t", "text"),
]
ROWS: list[Row] = [
    (1, INFINITY, INFINITY, INFINITY, "infinity"),
    (2, MINUS_INFINITY, MINUS_INFINITY, MINUS_INFINITY, "-infinity"),
    (
        3,
        dt.date(2021, 1, 1),
        dt.datetime(2021, 1, 1, 12),
        dt.datetime(2021, 1, 1, 12, tzinfo=dt.UTC),
        "2021-01-01",
    ),
]


def text(value: Any, type_: str) -> str | None:
    return None if value is None else TEXT_OUT[type_](value) if type_ != "text" else value


async def run_sql(pool: asyncpg.Pool, plan: Plan, rows: list[Row]) -> list[tuple[Any, ...]]:
    """The plan's SQL over `rows`, every output column as PostgreSQL's text."""
    ddl = ", ".join(f"{quote_ident(c.name)} {PG_TYPES[c.type]}" for c in plan.input)
    marks = ", ".join(
        f"CAST(CAST(${i + 1} AS text) AS {PG_TYPES[c.type]})" for i, c in enumerate(plan.input)
    )
    out = ", ".join(f"CAST({quote_ident(c.name)} AS text)" for c in plan.output)
    params = [tuple(text(v, c.type) for v, c in zip(r, plan.input, strict=True)) for r in rows]
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL TimeZone = 'UTC'")
        await conn.execute(f'CREATE TEMP TABLE "tmp" ({ddl}) ON COMMIT DROP')
        await conn.executemany(f'INSERT INTO "tmp" VALUES ({marks})', params)
        query = f"SELECT {out} FROM ({plan.select_sql(chr(34) + 'tmp' + chr(34))}) AS s"
        return [tuple(r) for r in await conn.fetch(query)]


def python_text(plan: Plan, rows: list[Row]) -> list[tuple[Any, ...]]:
    return [
        tuple(text(v, c.type) for v, c in zip(r, plan.output, strict=True))
        for r in plan.apply(rows)
    ]


@pytest.mark.parametrize(
    "operators",
    [
        [{"op": "filter", "where": "d > '2020-01-01'"}],
        [{"op": "filter", "where": "ts < '2021-06-01' and tz <> 'infinity'"}],
        [{"op": "cast", "columns": {"d": "text", "ts": "text", "tz": "text"}}],
        [{"op": "cast", "columns": {"d": "timestamptz", "ts": "date", "tz": "timestamp"}}],
        [{"op": "cast", "columns": {"t": "timestamptz"}}],
        [{"op": "cast", "columns": {"t": "date"}}, {"op": "filter", "where": "t >= d"}],
        [{"op": "constant", "column": "c", "value": "infinity", "type": "timestamp"}],
    ],
)
async def test_python_and_sql_agree_on_infinity(
    pool: asyncpg.Pool, operators: list[dict[str, Any]]
) -> None:
    plan = parse_spec({"operators": operators}).chain_for("s").plan(COLUMNS)
    expected = await run_sql(pool, plan, ROWS)
    assert python_text(plan, ROWS) == expected
    assert expected


async def test_both_refuse_infinity_as_a_time(pool: asyncpg.Pool) -> None:
    plan = parse_spec({"operators": [{"op": "cast", "columns": {"ts": "time"}}]})
    running = plan.chain_for("s").plan(COLUMNS)
    assert python_text(running, ROWS[2:]) == await run_sql(pool, running, ROWS[2:])
    # Row 2 of what this plan has applied (one row before).
    with pytest.raises(RowFault, match=r"column 'ts', row 2: cannot cast to time"):
        running.apply(ROWS[:1])
    with pytest.raises(asyncpg.PostgresError):
        await run_sql(pool, running, ROWS[:1])
