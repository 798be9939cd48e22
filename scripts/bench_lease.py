"""LeaseTask pickup latency and lease->complete throughput, each next to its
floor measured in the same run (the machine may be shared: compare ratios).

A real setu-server process on an embedded PostgreSQL (or SETU_DATABASE_URL);
lessees are gRPC clients in this process, all holding one agent's token (one
queue, so they contend for the same rows). Prints:
  - the SQL path alone: what the server runs per call (TaskService, with
    its group commit, on a pool of the server's size; no gRPC) from 16
    concurrent lessees, against a bare
    `FOR UPDATE SKIP LOCKED` lease + complete loop on a table of its own,
    run here on the same database (target: >= 50 % of the bare loop);
  - the gRPC floor: bench_grpc_floor.py's bare grpc.aio server, empty unary
    calls/s from 16 callers, in the same run;
  - throughput over gRPC with 1, 4 and 16 lessees, two ways: LeaseTask then
    CompleteTask (two round trips per task), and the eager way (CompleteTask
    with lease_next hands out the next task: about one round trip per task),
    each with its round trips per task and, at 16, its share of (floor calls/s
    / round trips per task) (target: >= 70 %);
  - pickup latency: task insert commit -> a parked LeaseTask returns it,
    side by side with a naive lessee that sleeps 1 s between empty attempts;
  - double leases found (must be 0): a task id leased twice, or a job with
    two lease events.

With --processes N the server runs as `setu-server --processes N` and the
floor as N bare servers on one port (bench_grpc_floor.py --processes N);
the callers then spread over 4 x N connections. --quick measures only the
row of issue 27's table (eager, 16 lessees) and its floor; --profile FILE
runs the server (one process) under cProfile and writes its stats there.
The last line is the table's row (TABLE | ...).

    python scripts/bench_lease.py [--rounds 300] [--tasks 4000] [--processes 1]
        [--quick] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from setu_client._proto.setu.v1 import agents_pb2 as pb  # noqa: E402
from setu_client._proto.setu.v1 import agents_pb2_grpc  # noqa: E402
from setu_client.channel import open_channel  # noqa: E402
from setu_client.clock import SystemClock  # noqa: E402
from setu_server.config import LeasePolicy, Settings  # noqa: E402
from setu_server.models import TaskKind  # noqa: E402
from setu_server.service.admin import AdminService  # noqa: E402
from setu_server.service.lifecycle import JobLifecycle  # noqa: E402
from setu_server.service.outcomes import TaskOutcomes  # noqa: E402
from setu_server.service.signals import TaskSignals  # noqa: E402
from setu_server.service.tasks import TaskService  # noqa: E402
from setu_server.service.watch import WatchHub  # noqa: E402
from setu_server.store import db, jobs, tasks  # noqa: E402
from setu_server.store.migrate import migrate  # noqa: E402
from setu_tasks.results import TestResult  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from bench_grpc_floor import start_floor, stop_floor  # noqa: E402

# The embedded PostgreSQL's data folder, once started (for its CPU figures).
EMBEDDED = ""
TARGET = 0.70  # of (floor calls/s / round trips per task), eager, 16 lessees


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
        connections: int = 4,
    ) -> None:
        self.pool, self.port, self.ws, self.agent_id, self.token = (
            pool,
            port,
            workspace_id,
            agent_id,
            token,
        )
        self.connections = connections

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
                                    task_id=answer.task.id,
                                    lease_token=answer.task.lease_token,
                                    test=pb.TestResult(ok=True),
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

    async def throughput(self, lessees: int, n: int, eager: bool) -> tuple[float, float, int]:
        """(tasks/s, round trips per task, double leases) for n tasks drained
        by `lessees` loops; `eager`: each completion asks for the next task."""
        await self.add_tasks(n)
        done = calls = 0
        finished = asyncio.Event()
        leased_ids: list[str] = []

        async def lessee(stub: Any) -> None:
            nonlocal done, calls
            task: pb.Task | None = None
            while not finished.is_set():
                if task is None:
                    calls += 1
                    answer = await stub.LeaseTask(
                        pb.LeaseTaskRequest(wait_seconds=1, max_tasks=1), timeout=16
                    )
                    if not answer.tasks:
                        continue
                    task = answer.tasks[0]
                leased_ids.append(task.id)
                calls += 1
                completed = await stub.CompleteTask(
                    pb.CompleteTaskRequest(
                        task_id=task.id,
                        lease_token=task.lease_token,
                        test=pb.TestResult(ok=True),
                        lease_next=eager,
                    )
                )
                task = completed.next if completed.HasField("next") else None
                done += 1
                if done >= n:
                    finished.set()

        channels = [
            open_channel(
                f"127.0.0.1:{self.port}", self.token, options=[("grpc.channel_pool_index", i)]
            )
            for i in range(min(lessees, self.connections))
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
        return done / elapsed, calls / max(done, 1), double

    async def sql_path(self, url: str, workers: int, n: int, eager: bool) -> float:
        """Tasks/s through what the server runs per call, without gRPC: its
        TaskService (group commit included) on a pool as large as the
        server's, driven by `workers` concurrent lessees; `eager`: each
        completion leases the next task in its transaction (CompleteTask
        with lease_next)."""
        await self.add_tasks(n)
        runtime = str(self.agent_id)
        done = 0
        pool = await db.create_pool(url, max_size=Settings().db_pool_size)
        service = task_service(pool)

        async def worker() -> None:
            nonlocal done
            held = await service.lease_many(runtime, 0, 1)
            while held:
                task = held[0]
                assert task.lease_token is not None
                following = await service.complete(
                    runtime, task.id, task.lease_token, TestResult(True, ""), lease_next=eager
                )
                if following is not None:
                    held = [following]
                else:
                    held = await service.lease_many(runtime, 0, 1)
                done += 1

        try:
            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(workers)))
            rate = done / (time.perf_counter() - started)
        finally:
            await pool.close()
        await self.pool.execute("DELETE FROM job WHERE workspace_id = $1", self.ws)
        return rate


def task_service(pool: asyncpg.Pool) -> TaskService:
    """A TaskService wired as setu_server.server wires it (no LISTEN: the
    lessees here never park)."""
    clock = SystemClock()
    lifecycle = JobLifecycle(pool, WatchHub(lambda ids: jobs.get_jobs(pool, ids)), clock)
    return TaskService(
        pool, clock, lifecycle, TaskSignals(), LeasePolicy(), TaskOutcomes(lifecycle, clock.sql_now)
    )


BARE_SETUP = """
DROP TABLE IF EXISTS bench_bare_task, bench_bare_job, bench_bare_event;
CREATE TABLE bench_bare_task (
    id uuid PRIMARY KEY, job_id uuid NOT NULL, state text NOT NULL, lease_token uuid,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX ON bench_bare_task (created_at) WHERE state = 'pending';
CREATE TABLE bench_bare_job (id uuid PRIMARY KEY, state text NOT NULL, version bigint NOT NULL);
CREATE TABLE bench_bare_event (job_id uuid NOT NULL, message text NOT NULL);
"""
BARE_LEASE = """
UPDATE bench_bare_task SET state = 'leased', lease_token = $1
WHERE id = (SELECT id FROM bench_bare_task WHERE state = 'pending'
            ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id"""
BARE_COMPLETE = """
UPDATE bench_bare_task SET state = 'succeeded' WHERE id = $1 AND lease_token = $2"""
# The same loop keeping Setu's contract by hand: every lease and every
# completion also moves its job (state, version), appends an event and
# NOTIFYs, in the same statement (so one transaction). What the contract
# itself costs, without anything of Setu's.
CONTRACT = """
WITH t AS ({task}), j AS (
    UPDATE bench_bare_job SET state = $3, version = version + 1
    FROM t WHERE bench_bare_job.id = t.job_id RETURNING bench_bare_job.id, version
), e AS (INSERT INTO bench_bare_event SELECT id, $3 FROM j)
SELECT t.id, pg_notify('bench_bare', j.id::text || ':' || j.version) FROM t, j"""
CONTRACT_LEASE = CONTRACT.format(
    task="UPDATE bench_bare_task SET state = 'leased', lease_token = $1 "
    "WHERE id = (SELECT id FROM bench_bare_task WHERE state = 'pending' AND $2::uuid IS NULL "
    "ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, job_id"
)
CONTRACT_COMPLETE = CONTRACT.format(
    task="UPDATE bench_bare_task SET state = 'succeeded' WHERE id = $2 AND lease_token = $1 "
    "RETURNING id, job_id"
)


async def bare_loop(
    pool: asyncpg.Pool, url: str, workers: int, n: int, *, contract: bool = False
) -> float:
    """Tasks/s of the textbook SKIP LOCKED queue: the floor for the SQL path;
    `contract`: with a job transition (event, NOTIFY) per lease and completion."""
    await pool.execute(BARE_SETUP)
    ids = [(uuid.uuid4(), uuid.uuid4()) for _ in range(n)]
    await pool.executemany(
        "INSERT INTO bench_bare_job (id, state, version) VALUES ($1, 'pending', 1)",
        [(job,) for _, job in ids],
    )
    await pool.executemany(
        "INSERT INTO bench_bare_task (id, job_id, state) VALUES ($1, $2, 'pending')", ids
    )
    done = 0

    async def worker(conn: asyncpg.Connection) -> None:
        nonlocal done
        while done < n:
            token = uuid.uuid4()
            if contract:
                leased = await conn.fetchval(CONTRACT_LEASE, token, None, "running")
            else:
                leased = await conn.fetchval(BARE_LEASE, token)
            if leased is None:
                return
            if contract:
                await conn.execute(CONTRACT_COMPLETE, token, leased, "succeeded")
            else:
                await conn.execute(BARE_COMPLETE, leased, token)
            done += 1

    try:
        return await _timed_workers(url, workers, worker, lambda: done)
    finally:
        await pool.execute("DROP TABLE bench_bare_task, bench_bare_job, bench_bare_event")


async def _timed_workers(url: str, workers: int, work: Any, done: Any) -> float:
    conns = [await db.connect(url) for _ in range(workers)]
    try:
        started = time.perf_counter()
        await asyncio.gather(*(work(c) for c in conns))
        return float(done()) / (time.perf_counter() - started)
    finally:
        for c in conns:
            await c.close()


async def grpc_floor(calls: int, processes: int = 1) -> float:
    """bench_grpc_floor.py's throughput floor, measured now: empty unary
    calls/s from 16 callers on 4 channels per server process against its
    bare grpc.aio server(s)."""
    port = _free_port()
    floor = start_floor(port, processes)
    channels = [
        grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.channel_pool_index", i)])
        for i in range(4 * processes)
    ]
    try:
        stubs = [health_pb2_grpc.HealthStub(c) for c in channels]
        now = health_pb2.HealthCheckRequest(service="now")
        await stubs[0].Check(now, wait_for_ready=True, timeout=30)
        done = 0

        async def caller(i: int) -> None:
            nonlocal done
            while done < calls:
                await stubs[i % len(stubs)].Check(now)
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(caller(i) for i in range(16)))
        return done / (time.perf_counter() - started)
    finally:
        for c in channels:
            await c.close()
        stop_floor(floor)


async def _database() -> tuple[str, Any]:
    url = os.environ.get("SETU_DATABASE_URL")
    if url:
        return url, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    folder = Path(tempfile.mkdtemp(prefix="setu-bench-")) / "pg"
    global EMBEDDED
    EMBEDDED = str(folder)
    server = pgserver.get_server(folder, cleanup_mode="delete")
    return server.get_uri("postgres"), server


async def main(
    rounds: int, total: int, processes: int, quick: bool, repeat: int, profile: str
) -> None:
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
        "SETU_HTTP_LISTEN": "",  # no run monitor: port 8080 may be taken
        "SETU_PROCESSES": str(processes),
    }
    command = [sys.executable, "-m", "setu_server.main"]
    if profile:
        command[1:1] = ["-m", "cProfile", "-o", profile]
    server = subprocess.Popen(  # noqa: ASYNC220 - started once, before measuring
        command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL
    )
    shares: list[float] = []
    try:
        bench = Bench(pool, port, workspace.id, agent.value.id, agent.secret, 4 * processes)
        await _wait_up(bench)
        print(
            f"setu-server pid {server.pid}, {processes} process(es); PostgreSQL "
            f"{'embedded' if embedded else url}"
        )
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared machine)")
        if not quick:
            await _sql_path(bench, pool, url, total)
        doubles = 0
        for round_ in range(repeat):
            floor = await grpc_floor(total * 2, processes)
            print(
                f"gRPC floor (bench_grpc_floor, {processes} process(es)), 16 callers, "
                f"empty unary: {floor:,.0f} calls/s"
            )
            print(
                f"{'lease -> complete over gRPC, one agent queue':<52} {'tasks/s':>9} "
                f"{'calls/task':>10} {'double':>7}"
            )
            for eager in (True,) if quick or round_ else (False, True):
                for lessees in (16,) if quick or round_ else (1, 4, 16):
                    before = _cpu(server.pid)
                    rate, trips, double = await bench.throughput(
                        lessees, total if lessees > 1 else total // 4, eager
                    )
                    after = _cpu(server.pid)
                    doubles += double
                    way = "eager (lease_next)" if eager else "LeaseTask + CompleteTask"
                    label = f"{way}, {lessees} lessees"
                    share = ""
                    if lessees == 16:
                        ceiling = floor / trips
                        share = f"  {rate / ceiling:.0%} of floor/{trips:.2f} = {ceiling:.0f}/s"
                        share += " (target >= 70 %)" if eager else ""
                        if eager:
                            shares.append(rate / ceiling)
                    print(f"  {label:<50} {rate:9.0f} {trips:10.2f} {double:7d}{share}")
                    if eager and lessees == 16:
                        tasks_done = total
                        spent = "  ".join(
                            f"{who} {(after[who] - before[who]) / tasks_done * 1e3:.2f}"
                            for who in after
                            if who in before
                        )
                        print(f"    CPU ms per task: {spent}")
        print(f"double leases in all: {doubles} (must be 0)")
        if not quick:
            await _pickup(bench, rounds)
    finally:
        server.terminate()
        server.wait(60)
        await pool.close()
        if embedded is not None:
            embedded.cleanup()
    share = statistics.median(shares)
    print(
        f"TABLE | lease→complete over gRPC, 16 lessees, eager, {processes} process(es) | "
        f"gRPC floor ÷ round trips ({processes} floor process(es)) | "
        f"median of {len(shares)} round(s) | {share:.0%} | ≥ {TARGET:.0%} | "
        f"{'met' if share >= TARGET else 'missed'}"
    )


def _cpu(server_pid: int) -> dict[str, float]:
    """CPU seconds used so far by the server (all its processes, cloud
    workers included), PostgreSQL (every postgres process) and this one."""

    def tree(proc: psutil.Process) -> float:
        total = 0.0
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    spent = {"server": tree(psutil.Process(server_pid))}
    # The embedded PostgreSQL's postmaster and its backends (other PostgreSQL
    # servers on a shared machine are not ours).
    for p in psutil.process_iter(["name", "cmdline"]):
        if EMBEDDED and p.info["name"] == "postgres" and EMBEDDED in " ".join(p.info["cmdline"]):
            spent["postgres"] = tree(p)
    me = psutil.Process().cpu_times()
    spent["lessees (this process)"] = me.user + me.system
    return spent


async def _sql_path(bench: Bench, pool: asyncpg.Pool, url: str, total: int) -> None:
    print(f"{'the SQL path alone, 16 lessees, no gRPC':<52} {'tasks/s':>9}")
    bare = await bare_loop(pool, url, 16, total)
    print(f"  {'bare FOR UPDATE SKIP LOCKED lease + complete':<50} {bare:9.0f}")
    kept = await bare_loop(pool, url, 16, total, contract=True)
    label = "the same, each with a job transition + NOTIFY"
    print(f"  {label:<50} {kept:9.0f}  {kept / bare:.0%} of bare (the contract's own cost)")
    for eager in (False, True):
        sql = await bench.sql_path(url, 16, total, eager)
        label = (
            "TaskService: complete, eager lease (lease_next)"
            if eager
            else ("TaskService: lease, then complete")
        )
        print(f"  {label:<50} {sql:9.0f}  {sql / bare:.0%} of bare (target >= 50 %)")


async def _pickup(bench: Bench, rounds: int) -> None:
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
    parser.add_argument("--processes", type=int, default=1, help="setu-server --processes")
    parser.add_argument("--quick", action="store_true", help="only the table's row")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the table's row")
    parser.add_argument("--profile", default="", help="cProfile the server into this file")
    args = parser.parse_args()
    if args.profile and args.processes != 1:
        parser.error("--profile profiles one server process: --processes 1")
    asyncio.run(
        main(args.rounds, args.tasks, args.processes, args.quick, args.repeat, args.profile)
    )
