"""What the statement cache is worth, and what a transaction-mode pooler
costs: one store query (`get_job`, a primary-key read) and one job
transition (state, event and NOTIFY in one statement), each timed on a pool
of Setu's own (setu_server/store/db.py) four ways:

  - PostgreSQL directly, statement cache on (SETU_DATABASE_POOLER=none);
  - PostgreSQL directly, statement cache off (what `transaction` turns off);
  - PgBouncer in transaction mode, statement cache off (`transaction`);
  - PgBouncer in session mode, statement cache on (`session`).

Sequential calls (one caller: the latency of one call) and 16 concurrent
callers on a pool of 10 (throughput). PostgreSQL is an embedded one (or
SETU_DATABASE_URL's server); PgBouncer is Debian's (scripts/ensure_test_tools.sh),
started here twice, once per mode. The machine may be shared: compare rows
of one run, not runs.

    python scripts/bench_pooler.py [--calls 2000]
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from setu_server.models import JobState  # noqa: E402
from setu_server.store import db, jobs  # noqa: E402
from setu_server.store.databases import ensure_database, with_database  # noqa: E402
from setu_server.store.migrate import migrate  # noqa: E402
from tests.factories import make_job, make_tenant  # noqa: E402
from tests.pooler import pgbouncer_binary, running_pgbouncer  # noqa: E402

CONCURRENCY = 16


def _server() -> tuple[str, Any]:
    url = os.environ.get("SETU_DATABASE_URL")
    if url:
        return url, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    folder = Path(tempfile.mkdtemp(prefix="setu-bench-")) / "pg"
    server = pgserver.get_server(folder, cleanup_mode="delete")
    return server.get_uri("postgres"), server


async def timed(call: Callable[[int], Awaitable[object]], calls: int, callers: int) -> float:
    """Calls per second, `callers` at once."""
    left = iter(range(calls))

    async def caller() -> None:
        for i in left:
            await call(i)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return calls / (time.perf_counter() - started)


async def measure(label: str, url: str, cache: bool, calls: int) -> None:
    pool = await db.create_pool(url, max_size=10, statement_cache=cache)
    try:
        tenant = await make_tenant(pool)
        ids = [(await make_job(pool, tenant.workspace_id)).id for _ in range(calls)]
        ws = tenant.workspace_id

        async def read(i: int) -> object:
            return await jobs.get_job(pool, ids[i], ws)

        async def end(i: int) -> object:
            return await jobs.transition_job(
                pool, ids[i], JobState.CANCELLED, now=None, message="bench"
            )

        await timed(read, min(calls, 200), 1)  # warm the pool and the cache
        one = await timed(read, calls, 1)
        many = await timed(read, calls, CONCURRENCY)
        ended = await timed(end, calls, CONCURRENCY)
        print(
            f"{label:<44} {1e6 / one:9.0f} {many:10.0f} {ended:12.0f}",
            flush=True,
        )
    finally:
        await pool.close()


async def main(calls: int) -> None:
    server_url, embedded = _server()
    try:
        name = f"setu_bench_{uuid.uuid4().hex[:8]}"
        await ensure_database(server_url, name)
        url = with_database(server_url, name)
        conn = await db.connect(url)
        await migrate(conn)
        await conn.close()
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared machine)")
        print(f"{'':<44} {'read, us':>9} {'reads/s':>10} {'ends/s':>12}")
        print(f"{'':<44} {'1 caller':>9} {'16 callers':>10} {'16 callers':>12}")
        await measure("PostgreSQL, statement cache on", url, True, calls)
        await measure("PostgreSQL, statement cache off", url, False, calls)
        if pgbouncer_binary() is None:
            print("pgbouncer is not installed (scripts/ensure_test_tools.sh): no pooler rows")
            return
        with running_pgbouncer(server_url, "transaction") as bouncer:
            await measure("PgBouncer transaction mode, cache off", bouncer.url(url), False, calls)
        with running_pgbouncer(server_url, "session") as bouncer:
            await measure("PgBouncer session mode, cache on", bouncer.url(url), True, calls)
    finally:
        if embedded is not None:
            embedded.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    asyncio.run(main(parser.parse_args().calls))
