"""Benchmark: an incremental re-sync against a full one, on the same table.

    .venv/bin/python scripts/bench_incremental.py [--rows 1000000] [--changed 0.01]

One PostgreSQL server (the embedded one, or SETU_BENCH_DATABASE_URL), two
databases: a `payments` source table (six columns, an index on
`updated_at`) and a destination. Setu's engine (what a cloud → cloud run
does: staged extract to a local blob folder, then an upsert load) copies it
once to seed the destination and the saved cursor; then `--changed` of the
rows are updated (a new `updated_at`), and the same re-sync runs twice:

- full: every row read and upserted (`sync: full`);
- incremental: `sync: incremental` on `updated_at`, from the saved cursor
  (setu_engine/planning/incremental.py): only the changed rows read and upserted.

Both are timed in this one process, back to back. Targets: the incremental
run takes ≤ 5 % of the full run's time, and reads at most 1.1 times the changed rows.
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

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.bench_copy import COLUMNS, Quiet, config_of, with_database
from setu_engine.kinds import WriteMode
from setu_engine.movement import transfer
from setu_engine.operators.chain import parse_spec
from setu_engine.planning import incremental
from setu_engine.providers.postgres import PROVIDER
from setu_engine.staged.blob import LocalBlobStore
from setu_engine.staged.markers import LoadIdentity

TABLE = """
CREATE TABLE payments (
    id           bigint PRIMARY KEY,
    customer_id  integer NOT NULL,
    amount       numeric(12, 2) NOT NULL,
    status       text NOT NULL,
    created_at   timestamptz NOT NULL,
    note         text,
    updated_at   timestamptz NOT NULL
)"""

FILL = """
INSERT INTO payments
SELECT i, ((i::bigint * 7919) % 100000)::integer, round((random() * 10000)::numeric, 2),
       (ARRAY['paid', 'pending', 'refunded', 'void'])[1 + i % 4],
       timestamptz '2024-01-01' + make_interval(secs => i * 17),
       CASE WHEN i % 5 = 0 THEN NULL ELSE 'order ' || i || ' via web' END,
       timestamptz '2024-01-01' + make_interval(secs => i * 17)
FROM generate_series(1, $1) i"""

# Every (1 / share)-th row gets a later updated_at: spread over the table.
CHANGE = """
UPDATE payments SET amount = amount + 1,
       updated_at = timestamptz '2030-01-01' + make_interval(secs => id)
WHERE id % $1 = 0"""

SYNC = {"sync": {"payments": {"mode": "incremental", "cursor": "updated_at"}}}


async def prepare(server: str, rows: int) -> tuple[str, str]:
    names = {"source": f"bench_inc_src_{uuid.uuid4().hex[:8]}"}
    names["destination"] = names["source"].replace("src", "dst")
    admin = await asyncpg.connect(server)
    try:
        for name in names.values():
            await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    source = with_database(server, names["source"])
    conn = await asyncpg.connect(source)
    try:
        await conn.execute(TABLE)
        await conn.execute(FILL, rows)
        await conn.execute("CREATE INDEX ON payments (updated_at)")
        await conn.execute("ANALYZE payments")
    finally:
        await conn.close()
    return source, with_database(server, names["destination"])


async def sync_once(
    source: str, destination: str, blob_dir: Path, spec: dict[str, Any], saved: dict[str, str]
) -> tuple[float, int, str | None]:
    """One staged upsert run; returns (seconds, rows read, cursor reached)."""
    started = time.perf_counter()
    src = await PROVIDER.connect(config_of(source))
    dst = await PROVIDER.connect(config_of(destination))
    try:
        chosen = transfer.select_streams(await src.discover(), ["payments"])
        deltas = await incremental.windows(src, chosen, spec, saved, WriteMode.UPSERT)
        streams = [d.stream for d in deltas]
        blob = LocalBlobStore(blob_dir / uuid.uuid4().hex)
        manifest = await transfer.stage(src, streams, blob, "bench/", Quiet())
        run = LoadIdentity(str(uuid.uuid4()))
        totals = await transfer.load(
            dst, manifest, blob, "bench/", parse_spec(spec), WriteMode.UPSERT, Quiet(), identity=run
        )
    finally:
        await src.close()
        await dst.close()
    mark = totals[0].cursor
    return time.perf_counter() - started, totals[0].extracted, mark.value if mark else None


async def bench(server: str, rows: int, share: float, blob_dir: Path) -> None:
    print(f"preparing {rows:,} rows ({len(COLUMNS) + 1} columns) ...", flush=True)
    source, destination = await prepare(server, rows)
    seconds, read, high = await sync_once(source, destination, blob_dir, SYNC, {})
    print(f"seed (first incremental run, reads all): {read:,} rows in {seconds:.2f} s")
    saved = {"public.payments": high} if high else {}
    conn = await asyncpg.connect(source)
    try:
        status = await conn.execute(CHANGE, round(1 / share))
    finally:
        await conn.close()
    changed = int(status.split()[-1])
    print(f"changed {changed:,} rows ({changed / rows:.2%})")

    full_s, full_read, _ = await sync_once(source, destination, blob_dir, {}, {})
    inc_s, inc_read, _ = await sync_once(source, destination, blob_dir, SYNC, saved)
    print(f"full re-sync:      {full_read:>10,} rows read in {full_s:8.2f} s")
    print(f"incremental run:   {inc_read:>10,} rows read in {inc_s:8.2f} s")
    ratio = inc_s / full_s
    print(
        f"incremental / full time: {ratio:.2%} (target <= 5%)  "
        f"{'OK' if ratio <= 0.05 else 'MISSED'}"
    )
    read_ratio = inc_read / changed if changed else float("inf")
    print(
        f"rows read / rows changed: {read_ratio:.3f} (target <= 1.1)  "
        f"{'OK' if read_ratio <= 1.1 else 'MISSED'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changed", type=float, default=0.01, help="share of rows changed")
    parser.add_argument("--server", default="")
    args = parser.parse_args()
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
        with tempfile.TemporaryDirectory(prefix="setu-bench-blob-") as blob_dir:
            asyncio.run(bench(server, args.rows, args.changed, Path(blob_dir)))
    finally:
        if embedded is not None:
            embedded.cleanup()


if __name__ == "__main__":
    main()
