"""dedupe and aggregate against SQL written by hand (DISTINCT ON, GROUP BY)
on real PostgreSQL: the Python accumulators, fed the stream in many batches,
and the chain's own compiled SQL must give the hand-written query's rows,
NULLs, NaN and ties included."""

from __future__ import annotations

import datetime as dt
import random
import struct
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import asyncpg
import pytest

from setu_engine.errors import OperatorError, SpecError
from setu_engine.filters.expr_compile import quote_ident
from setu_engine.operators.chain import Plan, parse_spec
from setu_engine.values.types import PG_TYPES, Column, Row
from tests.integration.test_operators_sql import same

COLUMNS = [
    Column("k", "text"),
    Column("g", "integer"),
    Column("ts", "timestamp"),
    Column("i", "integer"),
    Column("big", "bigint"),
    Column("n", "numeric"),
    Column("v", "double"),
    Column("r", "real"),
    Column("s", "text"),
    Column("b", "boolean"),
]
BATCH = 37


# Values a real column holds exactly (float32), some not exact in decimal:
# summed as float32 they would drift from the double sum.
REALS = [struct.unpack("f", struct.pack("f", x))[0] for x in (0.1, -1.3, 16777217.0, 3.0)]


def maybe(rng: random.Random, value: Any, nulls: float = 0.15) -> Any:
    return None if rng.random() < nulls else value


def source_rows(count: int = 600, seed: int = 14) -> list[Row]:
    """Few keys and few timestamps, so keys repeat and order values tie."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        rows.append(
            (
                maybe(rng, rng.choice(["a", "B", "é", "日本", ""])),
                maybe(rng, rng.randint(-2, 2)),
                maybe(rng, dt.datetime(2024, 1, 1) + dt.timedelta(hours=rng.randint(0, 6))),
                maybe(rng, rng.randint(-(2**31), 2**31 - 1)),
                maybe(rng, rng.randint(-(2**62), 2**62)),
                maybe(rng, Decimal(rng.randint(-(10**6), 10**6)).scaleb(-rng.randint(0, 4))),
                maybe(rng, rng.choice([0.1, -2.5, 1e10, float("nan"), rng.random()]), 0.2),
                maybe(rng, rng.choice(REALS)),
                maybe(rng, rng.choice(["x", "Y", "ümlaut", "z z", ""])),
                maybe(rng, rng.random() < 0.5),
            )
        )
    return rows


async def load(conn: asyncpg.Connection, rows: list[Row]) -> None:
    """A temp table "src" filled in stream order, with its position in `seq`."""
    ddl = ", ".join(f"{quote_ident(c.name)} {PG_TYPES[c.type]}" for c in COLUMNS)
    await conn.execute(f'CREATE TEMP TABLE "src" ({ddl}, seq integer) ON COMMIT DROP')
    marks = ", ".join(f"${i + 1}" for i in range(len(COLUMNS) + 1))
    await conn.executemany(
        f'INSERT INTO "src" VALUES ({marks})', [(*r, n) for n, r in enumerate(rows)]
    )


async def batches(rows: list[Row], size: int = BATCH) -> AsyncIterator[list[Row]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


async def python_rows(plan: Plan, rows: list[Row]) -> list[Row]:
    return [r async for batch in plan.apply_stream(batches(rows)) for r in batch]


def ordered(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: [(v is None, repr(v)) for v in r])


def assert_same(got: list[Row], expected: list[Row]) -> None:
    assert len(got) == len(expected), (len(got), len(expected))
    for py_row, sql_row in zip(ordered(got), ordered(expected), strict=True):
        diffs = [(a, b) for a, b in zip(py_row, sql_row, strict=True) if not same(a, b)]
        assert not diffs, f"python != sql: {diffs} in {py_row} / {sql_row}"


async def check(pool: asyncpg.Pool, spec: dict[str, Any], hand_sql: str, rows: list[Row]) -> None:
    """Python (in batches) == the hand-written SQL == the chain's own SQL."""
    plan = parse_spec(spec).chain_for("s").plan(COLUMNS)
    async with pool.acquire() as conn, conn.transaction():
        await load(conn, rows)
        expected = [tuple(r) for r in await conn.fetch(hand_sql)]
        compiled = [tuple(r) for r in await conn.fetch(plan.select_sql('"src"'))]
    assert expected, "a case whose rows all vanish proves little"
    assert_same(await python_rows(plan, rows), expected)
    assert_same(compiled, expected)


ALL = ", ".join(quote_ident(c.name) for c in COLUMNS)

DEDUPE_CASES = [
    (
        "latest by a timestamp, keys with nulls",
        {"op": "dedupe", "keys": ["k", "g"], "order_by": "ts"},
        f'SELECT DISTINCT ON (k, g) {ALL} FROM "src" ORDER BY k, g, ts DESC NULLS LAST, seq DESC',
    ),
    (
        "earliest, ordered by a double with NaN",
        {"op": "dedupe", "keys": ["g"], "order_by": "v", "order": "asc"},
        f'SELECT DISTINCT ON (g) {ALL} FROM "src" ORDER BY g, v ASC NULLS LAST, seq DESC',
    ),
    (
        "ordered by text in code point order",
        {"op": "dedupe", "keys": ["b"], "order_by": "s"},
        f'SELECT DISTINCT ON (b) {ALL} FROM "src" '
        'ORDER BY b, s COLLATE "C" DESC NULLS LAST, seq DESC',
    ),
]


@pytest.mark.parametrize(
    ("op", "hand_sql"), [c[1:] for c in DEDUPE_CASES], ids=[c[0] for c in DEDUPE_CASES]
)
async def test_dedupe_matches_distinct_on(
    pool: asyncpg.Pool, op: dict[str, Any], hand_sql: str
) -> None:
    await check(pool, {"operators": [op]}, hand_sql, source_rows())


async def test_dedupe_between_row_operators(pool: asyncpg.Pool) -> None:
    spec = {
        "operators": [
            {"op": "filter", "where": "i > 0 or i is null"},
            {"op": "rename", "columns": {"ts": "at"}},
            {"op": "dedupe", "keys": ["k"], "order_by": "at"},
            {"op": "select", "columns": ["k", "at", "i"]},
        ]
    }
    hand = (
        'SELECT DISTINCT ON (k) k, ts AS at, i FROM "src" WHERE i > 0 OR i IS NULL '
        "ORDER BY k, ts DESC NULLS LAST, seq DESC"
    )
    await check(pool, spec, hand, source_rows())


async def test_dedupe_ties_and_nulls_pick_the_documented_row() -> None:
    columns = [Column("id", "integer"), Column("at", "integer"), Column("tag", "text")]
    rows: list[Row] = [
        (1, 5, "first of a tie"),
        (1, 5, "last of a tie"),
        (1, None, "null order loses"),
        (None, 1, "null key a"),
        (None, 2, "null key b"),
        (2, None, "only nulls: first"),
        (2, None, "only nulls: last"),
    ]
    spec = parse_spec({"operators": [{"op": "dedupe", "keys": ["id"], "order_by": "at"}]})
    plan = spec.chain_for("s").plan(columns)
    got = [r async for b in plan.apply_stream(batches(rows, 2)) for r in b]
    assert sorted(r[2] for r in got) == ["last of a tie", "null key b", "only nulls: last"]


async def test_dedupe_orders_by_the_incremental_cursor_by_default() -> None:
    columns = [Column("id", "integer"), Column("updated", "integer")]
    chain = parse_spec({"operators": [{"op": "dedupe", "keys": ["id"]}]}).chain_for("s")
    plan = chain.plan(columns, cursor="updated")
    assert plan.apply([(1, 3), (1, 9), (1, 4)]) == [(1, 9)]
    with pytest.raises(SpecError, match=r"spec.operators\[0\].order_by: required"):
        chain.plan(columns)


AGGREGATE_CASES = [
    (
        "every metric, grouped by keys with nulls",
        {
            "op": "aggregate",
            "group_by": ["k", "g"],
            "metrics": {
                "rows": {"count": "*"},
                "with_v": {"count": "v"},
                "sum_i": {"sum": "i"},
                "sum_big": {"sum": "big"},
                "sum_n": {"sum": "n"},
                "sum_v": {"sum": "v"},
                "sum_r": {"sum": "r"},
                "min_s": {"min": "s"},
                "max_s": {"max": "s"},
                "min_ts": {"min": "ts"},
                "max_v": {"max": "v"},
                "min_v": {"min": "v"},
                "min_n": {"min": "n"},
                "min_b": {"min": "b"},
                "max_b": {"max": "b"},
            },
        },
        # Metrics come out in name order (a spec's JSON keeps no key order).
        'SELECT k, g, bool_or(b), max(s COLLATE "C"), max(v), bool_and(b), min(n), '
        'min(s COLLATE "C"), min(ts), min(v), count(*), sum(big), sum(i), sum(n), '
        'sum(r::float8), sum(v), count(v) FROM "src" GROUP BY k, g',
    ),
    (
        "grouped by a double with NaN",
        {"op": "aggregate", "group_by": ["v"], "metrics": {"n": {"count": "*"}, "m": {"max": "i"}}},
        'SELECT v, max(i), count(*) FROM "src" GROUP BY v',
    ),
    (
        "no group_by: one row",
        {"op": "aggregate", "metrics": {"n": {"count": "*"}, "s": {"sum": "i"}}},
        'SELECT count(*), sum(i) FROM "src"',
    ),
]


@pytest.mark.parametrize(
    ("op", "hand_sql"), [c[1:] for c in AGGREGATE_CASES], ids=[c[0] for c in AGGREGATE_CASES]
)
async def test_aggregate_matches_group_by(
    pool: asyncpg.Pool, op: dict[str, Any], hand_sql: str
) -> None:
    await check(pool, {"operators": [op]}, hand_sql, source_rows())


async def test_aggregate_then_filter_reads_like_having(pool: asyncpg.Pool) -> None:
    spec = {
        "operators": [
            {"op": "aggregate", "group_by": ["s"], "metrics": {"n": {"count": "*"}}},
            {"op": "filter", "where": "n > 97"},
            {"op": "rename", "columns": {"s": "label"}},
        ]
    }
    hand = 'SELECT s AS label, count(*) AS n FROM "src" GROUP BY s HAVING count(*) > 97'
    await check(pool, spec, hand, source_rows())


async def test_aggregate_types_its_metrics_as_postgresql(pool: asyncpg.Pool) -> None:
    spec = {
        "operators": [
            {
                "op": "aggregate",
                "metrics": {
                    "c": {"count": "*"},
                    "si": {"sum": "i"},
                    "sb": {"sum": "big"},
                    "sn": {"sum": "n"},
                    "sv": {"sum": "r"},
                    "mi": {"min": "ts"},
                },
            }
        ]
    }
    plan = parse_spec(spec).chain_for("s").plan(COLUMNS)
    types = [c.type for c in plan.output]
    assert [c.name for c in plan.output] == ["c", "mi", "sb", "si", "sn", "sv"]
    assert types == ["bigint", "timestamp", "numeric", "bigint", "numeric", "double"]
    # Over no rows at all: count 0, every other metric NULL (as SQL).
    assert plan.apply([]) == [(0, None, None, None, None, None)]


async def test_sum_overflow_raises_in_both(pool: asyncpg.Pool) -> None:
    spec = {"operators": [{"op": "aggregate", "metrics": {"s": {"sum": "i"}}}]}
    columns = [Column("i", "bigint")]
    plan = parse_spec(spec).chain_for("s").plan(columns)
    rows: list[Row] = [(2**62,), (2**62,), (2**62,)]
    # sum(bigint) is numeric: no overflow in either.
    assert plan.apply(rows) == [(Decimal(3 * 2**62),)]
    spec = {"operators": [{"op": "aggregate", "metrics": {"s": {"sum": "v"}}}]}
    plan = parse_spec(spec).chain_for("s").plan([Column("v", "double")])
    with pytest.raises(OperatorError):
        plan.apply([(1e308,), (1e308,)])
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute('CREATE TEMP TABLE "d" (v double precision) ON COMMIT DROP')
        await conn.executemany('INSERT INTO "d" VALUES ($1)', [(1e308,), (1e308,)])
        with pytest.raises(asyncpg.PostgresError):
            await conn.fetch(plan.select_sql('"d"'))
