"""Benchmark: what a re-sync costs the destination. A flights-shaped table is
upserted into an empty PostgreSQL table, then upserted again unchanged, then
again after a small share of its rows changed; each run prints its seconds,
what the load reports (inserted, updated, unchanged), the WAL it wrote and
the row updates and dead tuples PostgreSQL counted.

    .venv/bin/python scripts/bench_resync.py [--rows 336776] [--changed 1000]

One PostgreSQL server (the embedded one, or SETU_BENCH_DATABASE_URL). Before
updates were skipped when nothing changed, the second run rewrote every row
(336,776 updates, about 155 MiB of WAL, as many dead tuples).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from setu_engine.kinds import WriteMode
from setu_engine.movement import transfer
from setu_engine.operators.chain import parse_spec
from setu_engine.providers.postgres import PROVIDER
from setu_engine.staged.markers import LoadIdentity

FLIGHTS = """
CREATE TABLE flights (
    id integer PRIMARY KEY, year smallint NOT NULL, month smallint NOT NULL,
    day smallint NOT NULL, dep_time smallint, sched_dep_time smallint NOT NULL,
    dep_delay numeric(5,2), arr_time smallint, sched_arr_time smallint NOT NULL,
    arr_delay numeric(5,2), carrier char(2) NOT NULL, flight integer NOT NULL,
    tailnum varchar(6), origin char(3) NOT NULL, dest char(3) NOT NULL, air_time real,
    distance integer NOT NULL, hour smallint NOT NULL, minute smallint NOT NULL,
    time_hour timestamptz NOT NULL
);
INSERT INTO flights
SELECT i, 2013, 1 + i % 12, 1 + i % 28, (i % 2400)::smallint, (i % 2359)::smallint,
       (i % 300 - 20)::numeric(5,2), (i * 7 % 2400)::smallint, (i * 3 % 2359)::smallint,
       (i % 200 - 30)::numeric(5,2), chr(65 + i % 26) || chr(65 + i % 7), i % 8500,
       'N' || (i % 99999)::text, (ARRAY['EWR','JFK','LGA'])[1 + i % 3], 'ATL', (i % 600)::real,
       17 + i % 4900, i % 24, i % 60,
       '2013-01-01 05:00+00'::timestamptz + make_interval(hours => i % 8760)
FROM generate_series(1, $1) AS i;
"""


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def config_of(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
    config: dict[str, Any] = {
        "host": query.get("host", parts.hostname or "localhost"),
        "database": parts.path.lstrip("/"),
        "user": parts.username or "postgres",
    }
    if parts.port:
        config["port"] = parts.port
    return config


class Quiet:
    async def extracted(self, stream: str, rows: int) -> None:
        pass

    async def loaded(self, stream: str, rows: int) -> None:
        pass


STATS = """
SELECT pg_current_wal_lsn()::text AS lsn,
       coalesce((SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'flights'), 0) AS upd,
       coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'flights'), 0) AS dead
"""


async def stats(url: str) -> tuple[str, int, int]:
    conn = await asyncpg.connect(url)
    try:
        if int(await conn.fetchval("SHOW server_version_num")) >= 150000:
            await conn.execute("SELECT pg_stat_force_next_flush()")
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        r = await conn.fetchrow(STATS)
        return str(r["lsn"]), int(r["upd"]), int(r["dead"])
    finally:
        await conn.close()


async def wal_bytes(url: str, start: str, end: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        diff = "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)"
        return int(await conn.fetchval(diff, end, start))
    finally:
        await conn.close()


async def upsert(source: str, destination: str) -> transfer.StreamTotals:
    src = await PROVIDER.connect(config_of(source))
    dst = await PROVIDER.connect(config_of(destination))
    try:
        streams = transfer.select_streams(await src.discover(), ["flights"])
        (totals,) = await transfer.direct(
            src,
            dst,
            streams,
            parse_spec(None),
            WriteMode.UPSERT,
            Quiet(),
            identity=LoadIdentity(str(uuid.uuid4())),
        )
        return totals
    finally:
        await src.close()
        await dst.close()


async def bench(server: str, rows: int, changed: int) -> None:
    names = [f"bench_resync_{kind}_{uuid.uuid4().hex[:8]}" for kind in ("src", "dst")]
    admin = await asyncpg.connect(server)
    for name in names:
        await admin.execute(f"CREATE DATABASE {name}")
    await admin.close()
    source, destination = (with_database(server, n) for n in names)
    conn = await asyncpg.connect(source)
    await conn.execute(FLIGHTS.replace("$1", str(int(rows))))
    await conn.close()
    print(f"{rows:,} rows; {changed:,} changed before the third run")
    print(
        f"{'run':<12}{'seconds':>9}{'inserted':>10}{'updated':>10}{'unchanged':>11}"
        f"{'WAL MiB':>9}{'n_tup_upd':>11}{'dead':>9}"
    )
    for label in ("first", "unchanged", "changed"):
        if label == "changed":
            conn = await asyncpg.connect(source)
            await conn.execute("UPDATE flights SET dep_delay = 0 WHERE id <= $1", changed)
            await conn.close()
        lsn, upd, dead = await stats(destination)
        started = time.perf_counter()
        totals = await upsert(source, destination)
        took = time.perf_counter() - started
        lsn2, upd2, dead2 = await stats(destination)
        wal = await wal_bytes(destination, lsn, lsn2) / 2**20
        c = totals.changes
        assert c is not None
        print(
            f"{label:<12}{took:>9.2f}{c.inserted:>10,}{c.updated:>10,}{c.unchanged:>11,}"
            f"{wal:>9.1f}{upd2 - upd:>11,}{dead2 - dead:>9,}"
        )
    admin = await asyncpg.connect(server)
    for name in names:
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=336_776)
    parser.add_argument("--changed", type=int, default=1_000)
    args = parser.parse_args()
    server = os.environ.get("SETU_BENCH_DATABASE_URL", "")
    if server:
        asyncio.run(bench(server, args.rows, args.changed))
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver  # type: ignore[import-untyped]
    folder = Path(tempfile.mkdtemp(prefix="setu-bench-pg-"))
    embedded = pgserver.get_server(folder / "pg", cleanup_mode="delete")
    try:
        asyncio.run(bench(embedded.get_uri("postgres"), args.rows, args.changed))
    finally:
        embedded.cleanup()


if __name__ == "__main__":
    main()
