"""A generated dataset shaped like nycflights13 (flights: 19 columns, weather,
planes, airports, airlines), declared with the types a database administrator
would pick, for tests of type fidelity. Deterministic: the same seed gives
the same rows."""

from __future__ import annotations

import random
import string
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import asyncpg

DDL = """
CREATE TABLE airlines (
    carrier char(2) PRIMARY KEY,
    name varchar(40) NOT NULL
);
CREATE TABLE airports (
    faa char(3) PRIMARY KEY,
    name varchar(80) NOT NULL,
    lat numeric(9,6) NOT NULL,
    lon numeric(9,6) NOT NULL,
    alt integer,
    tz smallint,
    dst char(1),
    tzone varchar(40)
);
CREATE TABLE planes (
    tailnum varchar(6) PRIMARY KEY,
    year smallint,
    type varchar(30),
    manufacturer varchar(40),
    model varchar(30),
    engines smallint,
    seats smallint,
    speed smallint,
    engine varchar(20)
);
CREATE TABLE weather (
    origin char(3) NOT NULL,
    year smallint NOT NULL,
    month smallint NOT NULL,
    day smallint NOT NULL,
    hour smallint NOT NULL,
    temp numeric(5,2),
    dewp numeric(5,2),
    humid numeric(5,2),
    wind_dir smallint,
    wind_speed real,
    wind_gust real,
    precip numeric(4,2) NOT NULL,
    pressure numeric(6,1),
    visib real NOT NULL,
    time_hour timestamptz NOT NULL,
    PRIMARY KEY (origin, time_hour)
);
CREATE TABLE flights (
    year smallint NOT NULL,
    month smallint NOT NULL,
    day smallint NOT NULL,
    dep_time smallint,
    sched_dep_time smallint NOT NULL,
    dep_delay numeric(5,2),
    arr_time smallint,
    sched_arr_time smallint NOT NULL,
    arr_delay numeric(5,2),
    carrier char(2) NOT NULL,
    flight integer NOT NULL,
    tailnum varchar(6),
    origin char(3) NOT NULL,
    dest char(3) NOT NULL,
    air_time real,
    distance integer NOT NULL,
    hour smallint NOT NULL,
    minute smallint NOT NULL,
    time_hour timestamptz NOT NULL
);
"""

TABLES = ("airlines", "airports", "planes", "weather", "flights")
ORIGINS = ("EWR", "JFK", "LGA")
START = datetime(2013, 1, 1, 5, tzinfo=UTC)


def _code(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(string.ascii_uppercase) for _ in range(size))


def _maybe(rng: random.Random, value: Any, missing: float = 0.03) -> Any:
    return None if rng.random() < missing else value


def generate(flights: int = 3000, seed: int = 13) -> dict[str, list[tuple[Any, ...]]]:
    rng = random.Random(seed)
    carriers = sorted({_code(rng, 2) for _ in range(16)})
    airlines = [(c, f"{c} Airways Inc.") for c in carriers]
    faas = sorted(set(ORIGINS) | {_code(rng, 3) for _ in range(97)})
    airports = [
        (
            faa,
            f"{faa} Regional Airport 'Intl' é",
            Decimal(f"{rng.uniform(20, 60):.6f}"),
            Decimal(f"{rng.uniform(-150, -70):.6f}"),
            rng.randint(-50, 9000),
            _maybe(rng, rng.choice((-10, -9, -8, -7, -6, -5))),
            _maybe(rng, rng.choice("AUN")),
            _maybe(rng, "America/New_York"),
        )
        for faa in faas
    ]
    tails = sorted({"N" + _code(rng, 3) + str(rng.randint(10, 99)) for _ in range(200)})
    planes = [
        (
            tail,
            _maybe(rng, rng.randint(1960, 2013)),
            "Fixed wing multi engine",
            _maybe(rng, rng.choice(("BOEING", "AIRBUS", "EMBRAER", "BOMBARDIER INC"))),
            f"A{rng.randint(100, 999)}-{rng.randint(100, 299)}",
            rng.randint(1, 4),
            rng.randint(2, 450),
            _maybe(rng, rng.randint(90, 500), 0.9),
            "Turbo-fan",
        )
        for tail in tails
    ]
    weather = []
    for origin in ORIGINS:
        for hours in range(200):
            at = START + timedelta(hours=hours)
            weather.append(
                (
                    origin,
                    at.year,
                    at.month,
                    at.day,
                    at.hour,
                    _maybe(rng, Decimal(f"{rng.uniform(-10, 100):.2f}")),
                    _maybe(rng, Decimal(f"{rng.uniform(-20, 80):.2f}")),
                    _maybe(rng, Decimal(f"{rng.uniform(10, 100):.2f}")),
                    _maybe(rng, rng.randrange(0, 360, 10)),
                    _maybe(rng, rng.choice((0.0, 3.45234, 10.35702, 0.01))),
                    _maybe(rng, rng.uniform(16, 40), 0.7),
                    Decimal(f"{rng.choice((0, 0, 0, 0.01, 0.12)):.2f}"),
                    _maybe(rng, Decimal(f"{rng.uniform(990, 1040):.1f}")),
                    rng.choice((10.0, 0.12, 2.5)),
                    at,
                )
            )
    rows = []
    for _ in range(flights):
        at = START + timedelta(hours=rng.randrange(0, 24 * 365))
        sched = at.hour * 100 + rng.choice((0, 15, 30, 45))
        delay = _maybe(rng, Decimal(rng.randint(-20, 300)))
        rows.append(
            (
                at.year,
                at.month,
                at.day,
                None if delay is None else min(2359, sched + int(delay)),
                sched,
                delay,
                None if delay is None else rng.randint(0, 2359),
                rng.randint(0, 2359),
                None if delay is None else delay + rng.randint(-30, 30),
                rng.choice(carriers),
                rng.randint(1, 8500),
                _maybe(rng, rng.choice(tails)),
                rng.choice(ORIGINS),
                rng.choice(faas),
                None if delay is None else rng.choice((227.0, 160.5, 53.25)),
                rng.randint(17, 4983),
                at.hour,
                sched % 100,
                at,
            )
        )
    return {
        "airlines": airlines,
        "airports": airports,
        "planes": planes,
        "weather": weather,
        "flights": rows,
    }


async def create(conn: asyncpg.Connection, flights: int = 3000) -> dict[str, int]:
    """Creates and fills the five tables; returns their row counts."""
    await conn.execute(DDL)
    data = generate(flights)
    for table in TABLES:
        await conn.copy_records_to_table(table, records=data[table])
    return {table: len(rows) for table, rows in data.items()}


async def declared_types(conn: asyncpg.Connection, table: str) -> list[tuple[str, str, bool]]:
    """(column, format_type, NOT NULL) in column order."""
    records = await conn.fetch(
        """
        SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
        WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum
        """,
        table,
    )
    return [(r[0], r[1], r[2]) for r in records]


async def primary_key(conn: asyncpg.Connection, table: str) -> list[str]:
    records = await conn.fetch(
        """
        SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
        JOIN pg_attribute a ON a.attrelid = $1::regclass AND a.attnum = k.attnum
        WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY k.n
        """,
        table,
    )
    return [r[0] for r in records]


async def rows_of(conn: asyncpg.Connection, table: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in await conn.fetch(f"SELECT * FROM {table} t ORDER BY t::text")]
