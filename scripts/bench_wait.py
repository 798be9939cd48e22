"""WaitJob wake-up latency and park throughput, measured end to end.

A real setu-server process on an embedded PostgreSQL (or SETU_DATABASE_URL),
the real SDK in this process. Prints:
  - single waiter: time from the commit that ends a job (made through the
    database, as another server would) to wait_for_job returning, N rounds;
  - a burst: W waiters parked on W jobs, all ended by one statement: time to
    park them all, and each waiter's wake latency after the commit.

    python scripts/bench_wait.py [--rounds 200] [--waiters 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from setu_client import SetuClient  # noqa: E402
from setu_client.clock import SystemClock  # noqa: E402
from setu_server.models import JobState  # noqa: E402
from setu_server.service.admin import AdminService  # noqa: E402
from setu_server.store import db, jobs  # noqa: E402
from setu_server.store.migrate import migrate  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _report(name: str, seconds: list[float]) -> None:
    ms = [s * 1000 for s in seconds]
    print(
        f"{name}: n={len(ms)} p50={statistics.median(ms):.2f} ms "
        f"p95={_pct(ms, 0.95):.2f} ms p99={_pct(ms, 0.99):.2f} ms max={max(ms):.2f} ms"
    )


async def _database() -> tuple[str, object]:
    url = os.environ.get("SETU_DATABASE_URL")
    if url:
        return url, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    server = pgserver.get_server(
        Path(tempfile.mkdtemp(prefix="setu-bench-")) / "pg", cleanup_mode="delete"
    )
    return server.get_uri("postgres"), server


async def main(rounds: int, waiters: int) -> None:
    url, embedded = await _database()
    conn = await db.connect(url)
    await migrate(conn)
    await conn.close()
    pool = await db.create_pool(url, max_size=4)
    admin = AdminService(pool, SystemClock())
    workspace = await admin.create_workspace(f"bench-{uuid.uuid4().hex[:6]}")
    key = (await admin.create_api_key(workspace.id, "bench")).secret

    port = _free_port()
    env = os.environ | {
        "SETU_DATABASE_URL": url,
        "SETU_LISTEN": f"127.0.0.1:{port}",
        "SETU_LOG_LEVEL": "warning",
        "SETU_WAIT_CAP_SECONDS": "3600",
    }
    server = subprocess.Popen(  # noqa: ASYNC220 - started once, before measuring
        [sys.executable, "-m", "setu_server.main"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL
    )
    try:
        async with SetuClient(f"127.0.0.1:{port}", key) as client:
            await _wait_up(client)
            print(f"setu-server pid {server.pid}, PostgreSQL {'embedded' if embedded else url}")
            await _single(client, pool, workspace.id, rounds)
            await _burst(client, pool, workspace.id, waiters)
    finally:
        server.terminate()
        server.wait(30)
        await pool.close()
        if embedded is not None:
            embedded.cleanup()  # type: ignore[attr-defined]


async def _wait_up(client: SetuClient) -> None:
    for _ in range(300):
        try:
            await client.get_job(str(uuid.uuid4()))
        except Exception as exc:
            if type(exc).__name__ == "JobNotFound":
                return
            await asyncio.sleep(0.1)
    raise SystemExit("server did not come up")


async def _new_jobs(pool: asyncpg.Pool, workspace_id: uuid.UUID, n: int) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(n)]
    await pool.executemany(
        "INSERT INTO job (id, workspace_id, kind, state, created_at, updated_at) "
        "VALUES ($1, $2, 'test', 'running', now(), now())",
        [(i, workspace_id) for i in ids],
    )
    return ids


async def _single(client: SetuClient, pool: asyncpg.Pool, ws: uuid.UUID, rounds: int) -> None:
    latencies = []
    for job_id in await _new_jobs(pool, ws, rounds):
        waiting = asyncio.create_task(client.wait_for_job(str(job_id)))
        await asyncio.sleep(0.005)  # benchmark pacing: let the wait park first
        await jobs.transition_job(pool, job_id, JobState.SUCCEEDED, now=None, message="done")
        committed = time.perf_counter()
        await waiting
        latencies.append(time.perf_counter() - committed)
    _report("single waiter, commit -> wait_for_job returns", latencies)


async def _burst(client: SetuClient, pool: asyncpg.Pool, ws: uuid.UUID, n: int) -> None:
    ids = await _new_jobs(pool, ws, n)
    returned: list[float] = []

    async def wait(job_id: uuid.UUID) -> None:
        await client.wait_for_job(str(job_id))
        returned.append(time.perf_counter())

    tasks = [asyncio.create_task(wait(i)) for i in ids]
    # Benchmark pacing: give the burst time to park on the server (it runs in
    # another process, so we cannot watch its hub) before ending the jobs.
    await asyncio.sleep(max(2.0, n / 1000))
    await jobs.transition_jobs(pool, ids, JobState.SUCCEEDED, now=None, message="done")
    committed = time.perf_counter()
    await asyncio.gather(*tasks)
    _report(
        f"burst of {n}, one commit -> each wait_for_job returns", [r - committed for r in returned]
    )
    print(f"burst: all {n} answered {max(returned) - committed:.3f} s after the commit")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--waiters", type=int, default=5000)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.waiters))
