"""LeaseTask pickup latency and lease->complete throughput, end to end.

A real setu-server process on an embedded PostgreSQL (or SETU_DATABASE_URL);
lessees are gRPC clients in this process, all holding one agent's token (one
queue, so they contend for the same rows). Prints:
  - pickup latency: task insert commit -> a parked LeaseTask returns it,
    side by side with a naive lessee that sleeps 1 s between empty attempts;
  - throughput: tasks leased and completed per second over gRPC with 1, 4 and
    16 concurrent lessees, and the double leases found in the database (0).

    python scripts/bench_lease.py [--rounds 300] [--tasks 4000]
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
from typing import Any

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from setu_client._proto.setu.v1 import agents_pb2 as pb  # noqa: E402
from setu_client._proto.setu.v1 import agents_pb2_grpc  # noqa: E402
from setu_client.channel import open_channel  # noqa: E402
from setu_client.clock import SystemClock  # noqa: E402
from setu_server.models import TaskKind  # noqa: E402
from setu_server.service.admin import AdminService  # noqa: E402
from setu_server.store import db, tasks  # noqa: E402
from setu_server.store.migrate import migrate  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(
        self,
        pool: asyncpg.Pool,
        port: int,
        workspace_id: uuid.UUID,
        agent_id: uuid.UUID,
        token: str,
    ) -> None:
        self.pool, self.port, self.ws, self.agent_id, self.token = (
            pool,
            port,
            workspace_id,
            agent_id,
            token,
        )

    async def add_tasks(self, n: int) -> list[uuid.UUID]:
        jobs = await self.add_jobs(n)
        await self.pool.executemany(
            "INSERT INTO task (id, job_id, workspace_id, kind, state, runtime, agent_id, "
            "max_attempts, run_after, created_at, updated_at) "
            "VALUES ($1, $2, $3, 'test', 'pending', $4, $5, 1, now(), now(), now())",
            [(uuid.uuid4(), j, self.ws, str(self.agent_id), self.agent_id) for j in jobs],
        )
        return jobs

    async def add_one(self) -> None:
        job = (await self.add_jobs(1))[0]
        await tasks.insert_task(
            self.pool,
            id=uuid.uuid4(),
            job_id=job,
            workspace_id=self.ws,
            kind=TaskKind.TEST,
            agent_id=self.agent_id,
            max_attempts=1,
            payload={},
            now=None,
        )

    async def add_jobs(self, n: int) -> list[uuid.UUID]:
        jobs = [uuid.uuid4() for _ in range(n)]
        await self.pool.executemany(
            "INSERT INTO job (id, workspace_id, kind, state, created_at, updated_at) "
            "VALUES ($1, $2, 'test', 'pending', now(), now())",
            [(j, self.ws) for j in jobs],
        )
        return jobs

    async def pickup(self, rounds: int, naive: bool) -> list[float]:
        """Seconds from the insert's commit to a lessee holding the task."""
        latencies: list[float] = []
        async with open_channel(f"127.0.0.1:{self.port}", self.token) as channel:
            stub = agents_pb2_grpc.AgentServiceStub(channel)
            for _ in range(rounds):
                got = asyncio.Event()
                held_at: list[float] = []

                async def lessee(got: asyncio.Event, held_at: list[float]) -> None:
                    while True:
                        wait = 0 if naive else 30
                        answer = await stub.LeaseTask(
                            pb.LeaseTaskRequest(wait_seconds=wait), timeout=wait + 15
                        )
                        if answer.HasField("task"):
                            held_at.append(time.perf_counter())
                            await stub.CompleteTask(
                                pb.CompleteTaskRequest(
                                    task_id=answer.task.id, lease_token=answer.task.lease_token
                                )
                            )
                            got.set()
                            return
                        if naive:
                            await asyncio.sleep(1.0)  # the naive loop under comparison

                running = asyncio.create_task(lessee(got, held_at))
                # Pacing: let the lessee park (or fall into its sleep) first,
                # at a random phase of the naive loop's second.
                await asyncio.sleep(0.02 if not naive else 0.02 + (time.perf_counter() % 1.0))
                await self.add_one()
                committed = time.perf_counter()
                await got.wait()
                await running
                latencies.append(held_at[0] - committed)
        return latencies

    async def throughput(self, lessees: int, n: int) -> tuple[float, int]:
        """(tasks/s, double leases) for n tasks drained by `lessees` loops."""
        await self.add_tasks(n)
        done = 0
        finished = asyncio.Event()
        leased_ids: list[str] = []

        async def lessee(stub: Any) -> None:
            nonlocal done
            while not finished.is_set():
                answer = await stub.LeaseTask(pb.LeaseTaskRequest(wait_seconds=1), timeout=16)
                if not answer.HasField("task"):
                    continue
                leased_ids.append(answer.task.id)
                await stub.CompleteTask(
                    pb.CompleteTaskRequest(
                        task_id=answer.task.id, lease_token=answer.task.lease_token
                    )
                )
                done += 1
                if done >= n:
                    finished.set()

        channels = [
            open_channel(
                f"127.0.0.1:{self.port}", self.token, options=[("grpc.channel_pool_index", i)]
            )
            for i in range(min(lessees, 4))
        ]
        stubs = [agents_pb2_grpc.AgentServiceStub(c) for c in channels]
        started = time.perf_counter()
        await asyncio.gather(*(lessee(stubs[i % len(stubs)]) for i in range(lessees)))
        elapsed = time.perf_counter() - started
        for c in channels:
            await c.close()
        double = len(leased_ids) - len(set(leased_ids))
        double += await self.pool.fetchval(
            "SELECT count(*) FROM (SELECT job_id FROM job_event WHERE message LIKE "
            "'Task test leased by %' GROUP BY job_id HAVING count(*) > 1) twice"
        )
        await self.pool.execute("DELETE FROM job WHERE workspace_id = $1", self.ws)
        return n / elapsed, double


async def _database() -> tuple[str, Any]:
    url = os.environ.get("SETU_DATABASE_URL")
    if url:
        return url, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    folder = Path(tempfile.mkdtemp(prefix="setu-bench-")) / "pg"
    server = pgserver.get_server(folder, cleanup_mode="delete")
    return server.get_uri("postgres"), server


async def main(rounds: int, total: int) -> None:
    url, embedded = await _database()
    conn = await db.connect(url)
    await migrate(conn)
    await conn.close()
    pool = await db.create_pool(url, max_size=4)
    admin = AdminService(pool, SystemClock())
    workspace = await admin.create_workspace(f"bench-{uuid.uuid4().hex[:6]}")
    agent = await admin.create_agent(workspace.id, "bench")
    port = _free_port()
    env = os.environ | {
        "SETU_DATABASE_URL": url,
        "SETU_LISTEN": f"127.0.0.1:{port}",
        "SETU_LOG_LEVEL": "warning",
    }
    server = subprocess.Popen(  # noqa: ASYNC220 - started once, before measuring
        [sys.executable, "-m", "setu_server.main"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL
    )
    try:
        bench = Bench(pool, port, workspace.id, agent.value.id, agent.secret)
        await _wait_up(bench)
        print(f"setu-server pid {server.pid}; PostgreSQL {'embedded' if embedded else url}")
        print(f"{'pickup latency (insert commit -> lessee holds it)':<52} {'p50':>9} {'p99':>9}")
        for naive in (False, True):
            n = rounds if not naive else max(20, rounds // 10)
            seconds = await bench.pickup(n, naive)
            ms = [s * 1000 for s in seconds]
            label = (
                "naive: LeaseTask(wait=0), sleep 1 s when empty"
                if naive
                else ("LeaseTask long-poll (wakes on NOTIFY)")
            )
            print(f"  {label:<50} {statistics.median(ms):7.2f}ms {_pct(ms, 0.99):7.2f}ms  (n={n})")
        print(f"{'lease -> complete over gRPC, one agent queue':<52} {'tasks/s':>9} {'double':>9}")
        for lessees in (1, 4, 16):
            rate, double = await bench.throughput(lessees, total if lessees > 1 else total // 4)
            print(f"  {lessees:>2} concurrent lessees{'':<30} {rate:9.0f} {double:9d}")
    finally:
        server.terminate()
        server.wait(30)
        await pool.close()
        if embedded is not None:
            embedded.cleanup()


async def _wait_up(bench: Bench) -> None:
    for _ in range(300):
        try:
            async with open_channel(f"127.0.0.1:{bench.port}", bench.token) as channel:
                await agents_pb2_grpc.AgentServiceStub(channel).CheckIn(pb.CheckInRequest())
                return
        except Exception:
            await asyncio.sleep(0.1)
    raise SystemExit("server did not come up")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--tasks", type=int, default=4000)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.tasks))
