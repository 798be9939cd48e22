"""What the statement cache is worth, and what a transaction-mode pooler
costs: one store query (`get_job`, a primary-key read) and one job
transition (state, event and NOTIFY in one statement), each timed on a pool
of Setu's own (setu_server/store/db.py) four ways:

  - PostgreSQL directly, statement cache on (SETU_DATABASE_POOLER=none);
  - PostgreSQL directly, statement cache off (what `transaction` turns off);
  - PgBouncer in transaction mode, statement cache off (`transaction`);
  - PgBouncer in session mode, statement cache on (`session`).

Sequential calls (one caller: the latency of one call) and 16 concurrent
callers on a pool of 10 (throughput), the variants taking turns round by
round; each figure is the median of the rounds. PostgreSQL is an embedded one (or
SETU_DATABASE_URL's server); PgBouncer is Debian's (scripts/ensure_test_tools.sh),
started here twice, once per mode. The machine may be shared: compare rows
of one run, not runs.

    python scripts/bench_pooler.py [--calls 500] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
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


@dataclass
class Variant:
    label: str
    pool: Any
    ids: list[Any]
    workspace: Any
    figures: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


async def variant(label: str, url: str, cache: bool, jobs_count: int) -> Variant:
    pool = await db.create_pool(url, max_size=10, statement_cache=cache)
    tenant = await make_tenant(pool)
    ids = [(await make_job(pool, tenant.workspace_id)).id for _ in range(jobs_count)]
    return Variant(label, pool, ids, tenant.workspace_id)


async def one_round(v: Variant, calls: int, offset: int) -> None:
    async def read(i: int) -> object:
        return await jobs.get_job(v.pool, v.ids[i % len(v.ids)], v.workspace)

    async def end(i: int) -> object:
        return await jobs.transition_job(
            v.pool, v.ids[offset + i], JobState.CANCELLED, now=None, message="bench"
        )

    v.figures["read_us"].append(1e6 / await timed(read, calls, 1))
    v.figures["reads"].append(await timed(read, calls, CONCURRENCY))
    v.figures["ends"].append(await timed(end, calls, CONCURRENCY))


async def main(calls: int, rounds: int) -> None:
    server_url, embedded = _server()
    try:
        name = f"setu_bench_{uuid.uuid4().hex[:8]}"
        await ensure_database(server_url, name)
        url = with_database(server_url, name)
        conn = await db.connect(url)
        await migrate(conn)
        await conn.close()
        with contextlib.ExitStack() as stack:
            wanted = [("PostgreSQL, statement cache on", url, True)]
            wanted.append(("PostgreSQL, statement cache off", url, False))
            if pgbouncer_binary() is None:
                print("pgbouncer is not installed (scripts/ensure_test_tools.sh): no pooler rows")
            else:
                tx = stack.enter_context(running_pgbouncer(server_url, "transaction"))
                session = stack.enter_context(running_pgbouncer(server_url, "session"))
                wanted.append(("PgBouncer transaction mode, cache off", tx.url(url), False))
                wanted.append(("PgBouncer session mode, cache on", session.url(url), True))
            variants = [await variant(label, u, c, calls * rounds) for label, u, c in wanted]
            try:
                for v in variants:  # warm each pool and its cache
                    await timed(lambda i, v=v: jobs.get_job(v.pool, v.ids[i], v.workspace), 200, 1)
                # Round-robin, so that what the shared machine does meanwhile
                # falls on every variant alike; medians of the rounds.
                for r in range(rounds):
                    for v in variants:
                        await one_round(v, calls, r * calls)
                load = os.getloadavg()[0]
                cores = os.cpu_count()
                print(f"{rounds} rounds of {calls} calls each; load {load:.1f} on {cores} cores")
                print(f"{'':<40} {'read, us':>9} {'reads/s':>11} {'ends/s':>11}")
                print(f"{'':<40} {'1 caller':>9} {'16 callers':>11} {'16 callers':>11}")
                for v in variants:
                    f = {k: statistics.median(x) for k, x in v.figures.items()}
                    print(f"{v.label:<40} {f['read_us']:9.0f} {f['reads']:11.0f} {f['ends']:11.0f}")
            finally:
                for v in variants:
                    await v.pool.close()
    finally:
        if embedded is not None:
            embedded.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=500, help="calls per round and figure")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds))
