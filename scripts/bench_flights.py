"""A flights-shaped table end to end, next to the raw psql pipe, in one run.

    python scripts/bench_flights.py [--rows 336776] [--rounds 3]

One embedded PostgreSQL: a source database holding a generated table of the
nycflights13 `flights` shape (tests/flights.py: 19 columns of DBA-chosen
types, the same null rates and widths), --rows rows; a setu-server (its own
cloud workers, local blob folder) copying it cloud -> cloud to a second
database. Each round, back to back:

- raw: `psql -c "COPY flights TO STDOUT (FORMAT binary)" | psql -c "COPY
  flights FROM STDIN (FORMAT binary)"` into an empty table of a third
  database: the floor between these two databases;
- cli: `setu run PIPELINE --wait` (process start, imports, submit, progress
  until the end), overwrite; and `setu --help`, the CLI's start alone;
- sdk: the same run through the SDK (submit_run + wait_for_job), with its
  steps from the job's events.

Printed: each path's seconds and the median of per-round ratios to raw.
Target (issue 17): end to end <= 1.5 x the raw pipe.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_small_run import (  # noqa: E402
    embedded,
    free_port,
    postgres_config,
    process,
    timeline,
    until_up,
    with_database,
)

from setu_client import SetuClient  # noqa: E402
from setu_client.clock import SystemClock  # noqa: E402
from setu_server.service.admin import AdminService  # noqa: E402
from setu_server.store import db  # noqa: E402
from setu_server.store.migrate import migrate  # noqa: E402
from tests import flights  # noqa: E402

FLIGHTS_ROWS = 336_776


def psql_binary() -> str:
    import pgserver

    found = list(Path(pgserver.__file__).parent.glob("pginstall/bin/psql"))
    if not found:
        raise SystemExit("pgserver ships no psql here")
    return str(found[0])


def raw_pipe(psql: str, source: str, destination: str) -> float:
    started = time.perf_counter()
    out = subprocess.Popen(
        [psql, "-X", "-q", "-d", source, "-c", "COPY flights TO STDOUT (FORMAT binary)"],
        stdout=subprocess.PIPE,
    )
    into = subprocess.run(
        [psql, "-X", "-q", "-d", destination, "-c", "COPY flights FROM STDIN (FORMAT binary)"],
        stdin=out.stdout,
        check=True,
        capture_output=True,
    )
    assert out.stdout is not None
    out.stdout.close()
    if out.wait() != 0 or into.returncode != 0:
        raise SystemExit(f"raw pipe failed: {into.stderr!r}")
    return time.perf_counter() - started


async def prepare(server_url: str, rows: int) -> tuple[str, str, str, str]:
    names = ("setu", "src", "dst", "rawdst")
    conn = await asyncpg.connect(server_url)
    for name in names:
        await conn.execute(f"CREATE DATABASE {name}")
    await conn.close()
    setu, src, dst, rawdst = (
        with_database(server_url, n) for n in ("setu", "src", "dst", "rawdst")
    )
    conn = await asyncpg.connect(src)
    await flights.create(conn, rows)
    await conn.execute("ANALYZE")
    await conn.close()
    conn = await asyncpg.connect(rawdst)
    await conn.execute(flights.DDL)
    await conn.close()
    return setu, src, dst, rawdst


async def truncate(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("TRUNCATE flights")
    finally:
        await conn.close()


async def sdk_run(client: SetuClient, pipeline: str) -> tuple[float, dict[str, float]]:
    started = time.perf_counter()
    job = await client.submit_run(pipeline)
    outcome = await client.wait_for_job(job.id)
    seconds = time.perf_counter() - started
    if outcome.state.name != "SUCCEEDED":
        raise SystemExit(f"the run ended {outcome.state}: {outcome.error_message}")
    return seconds, await timeline(client, job.id, job.created_at)


async def cli_run(env: dict[str, str], *argv: str) -> float:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "setu"),
        *argv,
        env=os.environ | env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"setu run --wait failed: {err.decode()[-500:]}")
    return time.perf_counter() - started


async def main(args: argparse.Namespace) -> None:
    psql = psql_binary()
    with embedded() as server_url, tempfile.TemporaryDirectory(prefix="setu-flights-") as tmp:
        folder = Path(tmp)
        print(f"generating {args.rows:,} flights-shaped rows ...", flush=True)
        setu_url, src, dst, rawdst = await prepare(server_url, args.rows)
        conn = await db.connect(setu_url)
        await migrate(conn)
        await conn.close()
        pool = await db.create_pool(setu_url, max_size=2)
        admin = AdminService(pool, SystemClock())
        workspace = await admin.create_workspace("flights")
        key = (await admin.create_api_key(workspace.id, "bench")).secret
        await pool.close()
        port = free_port()
        server_env = {
            "SETU_DATABASE_URL": setu_url,
            "SETU_LISTEN": f"127.0.0.1:{port}",
            "SETU_HTTP_LISTEN": "",
            "SETU_LOG_LEVEL": "warning",
            "SETU_LOCAL_FILES_ROOT": "/",
            "SETU_CLOUD_ALLOW_NETWORKS": "127.0.0.0/8",
            "SETU_DATA_DIR": str(folder / "data"),
        }
        cli_env = {"SETU_SERVER": f"127.0.0.1:{port}", "SETU_API_KEY": key}
        results: list[dict[str, Any]] = []
        with process("setu_server.main", server_env, folder / "server.log"):
            async with SetuClient(f"127.0.0.1:{port}", key) as client:
                await until_up(client)
                source = await client.create_connection("src", "postgres", postgres_config(src))
                target = await client.create_connection("dst", "postgres", postgres_config(dst))
                pipeline = await client.create_pipeline(
                    "flights", source.id, target.id, streams=["flights"], write_mode="overwrite"
                )
                for round_ in range(args.rounds):
                    await truncate(rawdst)
                    raw = await asyncio.to_thread(raw_pipe, psql, src, rawdst)
                    cli = await cli_run(cli_env, "run", pipeline.id, "--wait")
                    # The CLI's own start: the same process answering --help.
                    start = await cli_run(cli_env, "--help")
                    sdk, steps = await sdk_run(client, pipeline.id)
                    results.append(
                        {"raw": raw, "cli": cli, "sdk": sdk, "start": start, "steps": steps}
                    )
                    print(
                        f"round {round_ + 1}: raw {raw:.2f} s, setu run --wait {cli:.2f} s, "
                        f"SDK {sdk:.2f} s",
                        flush=True,
                    )
    report(args, results)


def report(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    print(
        f"\n{args.rows:,} flights-shaped rows, PostgreSQL -> PostgreSQL, {len(results)} rounds; "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}"
    )
    raw = statistics.median(r["raw"] for r in results)
    print(f"  raw psql binary COPY pipe: {raw:.2f} s ({args.rows / raw:,.0f} rows/s), the floor")
    for path, name in (("cli", "setu run --wait"), ("sdk", "SDK submit + wait_for_job")):
        seconds = statistics.median(r[path] for r in results)
        ratio = statistics.median(r[path] / r["raw"] for r in results)
        print(
            f"  {name:<26} {seconds:.2f} s: {ratio:.2f} x raw (median of per-round ratios; "
            f"target <= 1.5: {'MET' if ratio <= 1.5 else 'NOT MET'})"
        )
    start = statistics.median(r["start"] for r in results)
    print(f"  of which the CLI's process start and imports (`setu --help`): {start:.2f} s")
    steps = {k for r in results for k in r["steps"]}
    print("  where the SDK run's time goes (job events, server clock, p50 from creation):")
    for step in sorted(
        steps, key=lambda s: statistics.median(r["steps"].get(s, 0) for r in results)
    ):
        ms = statistics.median(r["steps"][step] for r in results if step in r["steps"])
        print(f"    created -> {step:<14} {ms:8.0f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=FLIGHTS_ROWS)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
