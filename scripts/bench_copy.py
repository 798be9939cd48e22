"""Benchmark: PostgreSQL → PostgreSQL copy, staged and direct, next to a raw pipe.

    .venv/bin/python scripts/bench_copy.py [--rows 1000000] [--rounds 2]

One PostgreSQL server (the embedded one, or SETU_BENCH_DATABASE_URL), two
databases on it: a source table of six realistic columns and an empty
destination table of the same shape. Three ways to move every row:

- raw: `COPY … TO STDOUT (FORMAT binary)` piped straight into
  `COPY … FROM STDIN (FORMAT binary)` through one asyncpg client: the floor
  any Python tool can reach between these two databases.
- staged: Setu's engine, extract to parts in a local blob folder, then load
  (engine.transfer.stage + load): what a cloud → cloud run does.
- direct: Setu's engine, one pass with no blob (engine.transfer.direct).

Each copy runs in a fresh child process, so its peak RSS is its own; a
smaller table is copied too, to show that memory does not grow with it.
Targets: staged ≥ 50% and direct ≥ 70% of raw's rows/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
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

from setu_agent.engine import transfer
from setu_agent.engine.blob import LocalBlobStore
from setu_agent.engine.markers import LoadIdentity
from setu_agent.engine.operators import parse_spec
from setu_agent.engine.providers.base import WriteMode
from setu_agent.engine.providers.postgres import PROVIDER

TABLE = """
CREATE TABLE payments (
    id           bigint PRIMARY KEY,
    customer_id  integer NOT NULL,
    amount       numeric(12, 2) NOT NULL,
    status       text NOT NULL,
    created_at   timestamptz NOT NULL,
    note         text
)"""

FILL = """
INSERT INTO payments
SELECT i,
       ((i::bigint * 7919) % 100000)::integer,
       round((random() * 10000)::numeric, 2),
       (ARRAY['paid', 'pending', 'refunded', 'void'])[1 + i % 4],
       timestamptz '2024-01-01' + make_interval(secs => i * 17),
       CASE WHEN i % 5 = 0 THEN NULL ELSE 'order ' || i || ' via web' END
FROM generate_series(1, $1) i"""

COLUMNS = ("id", "customer_id", "amount", "status", "created_at", "note")


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


async def reset_destination(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DROP TABLE IF EXISTS payments")
        await conn.execute(TABLE)
    finally:
        await conn.close()


async def raw_pipe(source: str, destination: str, table: str) -> int:
    src = await asyncpg.connect(source)
    dst = await asyncpg.connect(destination)
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(16)

    async def sink(chunk: bytes) -> None:
        await queue.put(chunk)

    async def produce() -> None:
        await src.copy_from_query(f"SELECT * FROM {table}", output=sink, format="binary")
        await queue.put(None)

    async def chunks() -> Any:
        while (chunk := await queue.get()) is not None:
            yield chunk

    try:
        producer = asyncio.create_task(produce())
        status = await dst.copy_to_table(table, source=chunks(), format="binary")
        await producer
        return int(status.split()[-1])
    finally:
        await src.close()
        await dst.close()


async def engine_copy(mode: str, source: str, destination: str, blob_dir: Path) -> int:
    src = await PROVIDER.connect(config_of(source))
    dst = await PROVIDER.connect(config_of(destination))
    spec = parse_spec(None)
    run = LoadIdentity(str(uuid.uuid4()))  # a fresh run each time: every copy loads
    try:
        streams = transfer.select_streams(await src.discover(), ["payments"])
        if mode == "direct":
            totals = await transfer.direct(
                src, dst, streams, spec, WriteMode.APPEND, Quiet(), identity=run
            )
        else:
            blob = LocalBlobStore(blob_dir)
            manifest = await transfer.stage(src, streams, blob, "bench/", Quiet())
            totals = await transfer.load(
                dst, manifest, blob, "bench/", spec, WriteMode.APPEND, Quiet(), identity=run
            )
        return sum(t.loaded for t in totals)
    finally:
        await src.close()
        await dst.close()


def worker(args: argparse.Namespace) -> None:
    """One copy in this process; prints rows, seconds and peak RSS as JSON."""
    source = with_database(args.server, f"bench_src_{args.rows}")
    destination = with_database(args.server, "bench_dst")
    asyncio.run(reset_destination(destination))
    idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="setu-bench-blob-") as blob_dir:
        if args.worker == "raw":
            rows = asyncio.run(raw_pipe(source, destination, "payments"))
        else:
            rows = asyncio.run(engine_copy(args.worker, source, destination, Path(blob_dir)))
        seconds = time.perf_counter() - started
        staged = sum(f.stat().st_size for f in Path(blob_dir).rglob("*") if f.is_file())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "rows": rows,
                "seconds": seconds,
                "peak_rss_mib": peak / 1024,
                "idle_rss_mib": idle / 1024,
                "staged_mib": staged / 2**20,
            }
        )
    )


async def prepare(server: str, sizes: list[int]) -> None:
    admin = await asyncpg.connect(server)
    try:
        for name in [f"bench_src_{n}" for n in sizes] + ["bench_dst"]:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    for rows in sizes:
        conn = await asyncpg.connect(with_database(server, f"bench_src_{rows}"))
        try:
            await conn.execute(TABLE)
            await conn.execute(FILL, rows)
            await conn.execute("VACUUM ANALYZE payments")
        finally:
            await conn.close()


def run_child(server: str, mode: str, rows: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", mode, "--rows", str(rows), "--server", server],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["rows"] != rows:
        raise SystemExit(f"{mode} copied {result['rows']} rows, not {rows}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=200_000, help="second size, for memory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", default="")
    parser.add_argument("--worker", choices=["raw", "staged", "direct"])
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    server = args.server or os.environ.get("SETU_BENCH_DATABASE_URL", "")
    embedded = None
    if not server:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver  # type: ignore[import-untyped]
        folder = Path(tempfile.mkdtemp(prefix="setu-bench-pg-"))
        embedded = pgserver.get_server(folder / "pg", cleanup_mode="delete")
        server = embedded.get_uri("postgres")
    try:
        sizes = [args.rows, args.small]
        print(f"preparing {args.rows:,} and {args.small:,} rows (6 columns) ...", flush=True)
        asyncio.run(prepare(server, sizes))
        modes = ["raw", "staged", "direct"]
        best: dict[str, dict[str, float]] = {}
        for round_ in range(args.rounds):
            for mode in modes:
                result = run_child(server, mode, args.rows)
                rate = result["rows"] / result["seconds"]
                print(
                    f"round {round_ + 1} {mode:>6}: {rate:>10,.0f} rows/s "
                    f"({result['seconds']:.2f} s, peak RSS {result['peak_rss_mib']:.0f} MiB)",
                    flush=True,
                )
                if mode not in best or result["seconds"] < best[mode]["seconds"]:
                    best[mode] = result
        small = {mode: run_child(server, mode, args.small) for mode in modes}
    finally:
        if embedded is not None:
            embedded.cleanup()

    raw_rate = best["raw"]["rows"] / best["raw"]["seconds"]
    print(f"\n{args.rows:,} rows, best of {args.rounds} (rows/s; share of raw; peak RSS):")
    targets = {"raw": None, "staged": 0.5, "direct": 0.7}
    for mode in modes:
        rate = best[mode]["rows"] / best[mode]["seconds"]
        share = rate / raw_rate
        target = targets[mode]
        verdict = "" if target is None else (" met" if share >= target else " NOT met")
        goal = "" if target is None else f" (target ≥ {target:.0%}:{verdict})"
        print(
            f"  {mode:>6}: {rate:>10,.0f} rows/s  {share:>5.0%}{goal}  "
            f"peak RSS {best[mode]['peak_rss_mib']:.0f} MiB at {args.rows:,} rows, "
            f"{small[mode]['peak_rss_mib']:.0f} MiB at {args.small:,} rows"
        )
    print(f"  staged parts: {best['staged']['staged_mib']:.1f} MiB (zstd) for {args.rows:,} rows")


if __name__ == "__main__":
    main()
