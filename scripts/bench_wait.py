"""WaitJob at scale: server memory, short-call latency, wake latency, RPC cost.

Starts two real setu-server processes, A and B, on one embedded PostgreSQL
(or SETU_DATABASE_URL), both with SETU_WAIT_CAP_SECONDS=3600 so that parked
waits stay parked (and tells the SDK that cap, see CountingClient), and drives
them with the real SDK over 127.0.0.1. Jobs are inserted RUNNING straight into
the database, without tasks, so CancelJob ends them at once through the
server's own transition path. In the order run:

(b) Wake latency on one server, one waiter at a time (--rounds each):
    - CancelJob sent to A, which commits and then publishes to its own hub;
    - a commit made straight on the database (A learns of it by NOTIFY);
    - in the same run, a client that polls get_job every 10 ms.
    Each is timed to wait_for_job's (or the poller's) return from the moment
    the ending call returned (the commit is done by then: this can only
    understate, and can even be negative when the wake reply overtakes the
    CancelJob reply) and from the moment it was issued (before the commit:
    this can only overstate). The targets are judged on the first. RPCs per
    waiting job per minute: WaitJob calls are counted (CountingClient) and
    scaled to the production 60 s cap; the poller's are counted per minute.
(c) The same across processes: the waiter parks on B, CancelJob goes to A, so
    B learns of it only through PostgreSQL LISTEN/NOTIFY.
(a) Memory and short calls, on server A. Its RSS (psutil) idle, then with
    each --parked total of WaitJob calls parked on distinct RUNNING jobs, held
    by --client-procs worker processes (this script, spawned), each with its
    own SetuClient; "parked" is detected as explained in `until_quiet`.
    Per-wait memory = (RSS parked - RSS idle) / N. --short-calls sequential
    GetJob calls (client.get_job) to A idle and with the waits parked, each
    paired with one to B, which holds no waits, as a control for the load of
    the machine. The outcome of every WaitJob call the workers made is
    tallied (a parked wait should make exactly one). Then one statement ends
    every parked job: time until each parked wait_for_job returns.
Then the original in-process burst (--waiters): W waits, one commit.

--through-proxy measures instead (and only) long-polls through a real nginx
(Debian's, as the tests start it: tests/topology.py) in front of one
setu-server with the production 60 s WaitJob cap, at grpc_read_timeout 60 s
(nginx's default) and 15 s (Envoy's default route timeout), each against a
direct connection as the control: wake latency (--rounds waits, each ended
by a commit) and, with --proxy-waits jobs waited on for --proxy-seconds,
WaitJob calls per waiting job per minute, the calls' outcomes (a cut is an
UNAVAILABLE from nginx's 504) and the window the SDK settled on.

Every process started here is stopped on the way out, errors included.

    python scripts/bench_wait.py [--rounds 300] [--parked 10000,50000]
        [--short-calls 500] [--client-procs 2] [--channels 4] [--waiters 2000]
    python scripts/bench_wait.py --through-proxy [--rounds 100]
        [--proxy-waits 20] [--proxy-seconds 120]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import asyncpg
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from setu_client import TERMINAL_STATES, JobNotFound, SetuClient, SetuError  # noqa: E402
from setu_client.clock import SystemClock  # noqa: E402
from setu_server.models import JobState  # noqa: E402
from setu_server.service.admin import AdminService  # noqa: E402
from setu_server.store import db, jobs  # noqa: E402
from setu_server.store.migrate import migrate  # noqa: E402

WAIT_CAP_SECONDS = 3600  # parked waits must outlive the whole run
PRODUCTION_WAIT_CAP_SECONDS = 60.0  # the default WaitJob cap: what a real waiting client pays
POLL_PERIOD = 0.010
# Benchmark pacing: time for one WaitJob to reach the server and park (auth
# and one job read, about 2 ms on a quiet machine) before the job is ended. A
# wait that had not parked would still answer at once (it reads the job after
# subscribing), so a short pacing could only flatter the poller, not WaitJob.
PARK_PACING = 0.020
MIB = 1024 * 1024
TARGET_PARKED = 50_000  # the memory target: this many parked within 1 GiB

# All timestamps come from time.monotonic(): CLOCK_MONOTONIC on Linux, one
# clock for every process of the machine, so worker timestamps compare with
# the parent's.
now = time.monotonic


# -- report


@dataclass
class Report:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def section(self, title: str) -> None:
        self.rows.append((title, "", "", ""))

    def add(self, metric: str, value: str, target: str = "", met: bool | None = None) -> None:
        verdict = "" if met is None else ("MET" if met else "NOT MET")
        self.rows.append(("  " + metric, value, target, verdict))

    def print(self) -> None:
        # Section titles (rows with only a first cell) may run past the columns.
        widths = [max((len(row[i]) for row in self.rows if row[1]), default=0) for i in range(4)]
        line = "-" * (sum(widths) + 9)
        print(line)
        for row in self.rows:
            if not row[1]:
                print(row[0])
                continue
            print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        print(line, flush=True)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load() -> str:
    # Other work on this machine skews every figure: show how busy it was.
    return "load average 1/5 min {:.2f}/{:.2f}".format(*os.getloadavg()[:2])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return (
        f"p50 {statistics.median(ms):.2f} ms, p99 {pct(ms, 0.99):.2f} ms "
        f"(n={len(ms)}, max {max(ms):.2f})"
    )


def p50(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


def p99(seconds: list[float]) -> float:
    return pct(seconds, 0.99) * 1000


# -- processes


@dataclass
class Server:
    name: str
    target: str
    process: subprocess.Popen[bytes]

    @property
    def ps(self) -> psutil.Process:
        return psutil.Process(self.process.pid)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(name: str, url: str, wait_cap: float = WAIT_CAP_SECONDS) -> Server:
    port = free_port()
    env = os.environ | {
        "SETU_DATABASE_URL": url,
        "SETU_LISTEN": f"127.0.0.1:{port}",
        "SETU_LOG_LEVEL": "warning",
        "SETU_WAIT_CAP_SECONDS": str(wait_cap),
        "SETU_HTTP_LISTEN": "",  # no run monitor: port 8080 may be taken
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "setu_server.main"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL
    )
    return Server(name, f"127.0.0.1:{port}", process)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


async def wait_up(client: SetuClient, server: Server) -> None:
    for _ in range(300):
        if server.process.poll() is not None:
            raise RuntimeError(f"server {server.name} exited with {server.process.returncode}")
        try:
            # The SDK retries UNAVAILABLE for minutes; here one try at a time.
            async with asyncio.timeout(1.0):
                await client.get_job(str(uuid.uuid4()))
        except JobNotFound:
            return
        except (TimeoutError, SetuError):
            await asyncio.sleep(0.1)
    raise RuntimeError(f"server {server.name} did not come up")


def rss(process: psutil.Process) -> int:
    return int(process.memory_info().rss)


def peak_rss(process: psutil.Process) -> int:
    """VmHWM: the most RSS the process has had (Linux)."""
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def until_quiet(
    processes: list[psutil.Process],
    *,
    window: float = 0.5,
    idle_share: float = 0.05,
    windows: int = 3,
    timeout: float = 900.0,
) -> float:
    """Seconds until every process has used under `idle_share` of a core for
    `windows` windows in a row.

    This is how we know issued WaitJob calls are parked: the hub lives in
    another process, and every call costs the server CPU (accept, auth query,
    job read, subscribe) and the client CPU (issue) until it is parked, after
    which it costs nothing. So once the server and the client workers are all
    idle, every call in flight has been parked (a wait sleeping before a
    retry is idle too, so the caller also checks that every wait is inside a
    WaitJob call, that none returned, and tallies the calls' outcomes; at
    release every wait must return terminal).
    """
    started = now()
    last = [cpu_seconds(p) for p in processes]
    quiet = 0
    while quiet < windows:
        if now() - started > timeout:
            raise RuntimeError(f"processes still busy after {timeout:.0f} s")
        await asyncio.sleep(window)
        current = [cpu_seconds(p) for p in processes]
        busiest = max(b - a for a, b in zip(last, current, strict=True)) / window
        quiet = quiet + 1 if busiest < idle_share else 0
        last = current
    return now() - started - window * windows


# -- database


def database(cleanup: contextlib.AsyncExitStack) -> tuple[str, bool]:
    url = os.environ.get("SETU_DATABASE_URL")
    if url:
        return url, False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    folder = Path(tempfile.mkdtemp(prefix="setu-bench-"))
    cleanup.callback(shutil.rmtree, folder, ignore_errors=True)
    server = pgserver.get_server(folder / "pg", cleanup_mode="delete")
    cleanup.callback(server.cleanup)
    return server.get_uri("postgres"), True


async def bench_workspace(
    url: str, cleanup: contextlib.AsyncExitStack
) -> tuple[asyncpg.Pool, uuid.UUID, str]:
    """The database migrated, a pool on it (closed by `cleanup`), and a
    workspace of the benchmark's own with its API key."""
    conn = await db.connect(url)
    await migrate(conn)
    await conn.close()
    pool = await db.create_pool(url, max_size=4)
    cleanup.push_async_callback(pool.close)
    admin = AdminService(pool, SystemClock())
    workspace = await admin.create_workspace(f"bench-{uuid.uuid4().hex[:6]}")
    key = (await admin.create_api_key(workspace.id, "bench")).secret
    return pool, workspace.id, key


async def new_jobs(pool: asyncpg.Pool, workspace_id: uuid.UUID, n: int) -> list[str]:
    ids = [uuid.uuid4() for _ in range(n)]
    await pool.executemany(
        "INSERT INTO job (id, workspace_id, kind, state, created_at, updated_at) "
        "VALUES ($1, $2, 'test', 'running', now(), now())",
        [(i, workspace_id) for i in ids],
    )
    return [str(i) for i in ids]


async def end_jobs(pool: asyncpg.Pool, ids: list[str]) -> None:
    await jobs.transition_jobs(
        pool, [uuid.UUID(i) for i in ids], JobState.SUCCEEDED, now=None, message="done"
    )


class CountingClient(SetuClient):
    """A SetuClient that tallies the outcome of every WaitJob RPC it makes,
    re-issues and retries included (the SDK loops over `_wait_once`)."""

    def __init__(
        self,
        target: str,
        key: str,
        long_poll_channels: int = 2,
        long_poll_seconds: float | None = WAIT_CAP_SECONDS + 15.0,
    ) -> None:
        # The SDK's long-poll window is its deadline, and the server answers
        # 1 s before it: left at the default 55 s, every parked wait would be
        # re-issued each 54 s, and 50,000 of them would never be quiet. Give
        # it room above the cap we run with (None: the SDK's default).
        super().__init__(
            target, key, long_poll_channels=long_poll_channels, long_poll_seconds=long_poll_seconds
        )
        self.wait_calls: Counter[str] = Counter()
        # Waits inside a WaitJob call right now (not between retries).
        self.in_flight = 0

    @property
    def wait_call_count(self) -> int:
        return sum(self.wait_calls.values())

    async def _wait_once(self, *args: Any) -> Any:
        # Whatever the SDK passes its one WaitJob attempt (the job, the
        # window, the channel), and whatever it gets back with the answer.
        self.in_flight += 1
        try:
            result = await super()._wait_once(*args)
        except Exception as exc:
            code = getattr(exc, "code", None)
            self.wait_calls[f"{type(exc).__name__} {getattr(code, 'name', '')}".strip()] += 1
            raise
        finally:
            self.in_flight -= 1
        answer = result[0] if isinstance(result, tuple) else result
        self.wait_calls["terminal" if answer.terminal else "not terminal"] += 1
        return result


def outcomes(calls: Counter[str]) -> str:
    return ", ".join(f"{n:,} {what}" for what, n in calls.most_common()) or "none"


# -- client worker processes (they hold the parked waits)


def worker_entry(target: str, key: str, channels: int, conn: Connection) -> None:
    asyncio.run(hold_waits(target, key, channels, conn))


async def hold_waits(target: str, key: str, channels: int, conn: Connection) -> None:
    """Serve the parent's commands: park / status / collect / stop."""
    client = CountingClient(target, key, long_poll_channels=channels)
    async with client:
        tasks: list[asyncio.Task[None]] = []
        returned: list[float] = []
        failures: list[str] = []

        async def wait(job_id: str) -> None:
            try:
                await client.wait_for_job(job_id)
                returned.append(now())
            except Exception as exc:
                failures.append(repr(exc))

        while True:
            command, argument = await asyncio.to_thread(conn.recv)
            if command == "park":
                tasks += [asyncio.create_task(wait(job_id)) for job_id in argument]
                conn.send(len(tasks))
            elif command == "status":
                conn.send(
                    {
                        "returned": len(returned),
                        "failures": failures[:3],
                        "calls": client.wait_calls,
                        "in_flight": client.in_flight,
                    }
                )
            elif command == "collect":
                await asyncio.wait(tasks, timeout=argument)
                conn.send(
                    {"returned": returned, "failures": len(failures), "calls": client.wait_calls}
                )
            elif command == "stop":
                return


class Workers:
    def __init__(self, target: str, key: str, n: int, channels: int) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a process using gRPC
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for _ in range(n):
            ours, theirs = context.Pipe()
            proc = context.Process(
                target=worker_entry, args=(target, key, channels, theirs), daemon=True
            )
            proc.start()
            self._conns.append(ours)
            self._procs.append(proc)

    @property
    def processes(self) -> list[psutil.Process]:
        return [psutil.Process(p.pid) for p in self._procs]

    async def _ask(self, command: str, argument: Any = None) -> list[Any]:
        for conn in self._conns:
            conn.send((command, argument))
        return [await asyncio.to_thread(conn.recv) for conn in self._conns]

    async def park(self, ids: list[str]) -> None:
        n = len(self._conns)
        for i, conn in enumerate(self._conns):
            conn.send(("park", ids[i::n]))
        for conn in self._conns:
            await asyncio.to_thread(conn.recv)

    async def status(self) -> tuple[int, list[str], Counter[str], int]:
        """Waits returned, failures, WaitJob outcomes, waits inside a call now."""
        answers = await self._ask("status")
        returned = sum(a["returned"] for a in answers)
        failures = [f for a in answers for f in a["failures"]]
        calls: Counter[str] = sum((a["calls"] for a in answers), Counter())
        return returned, failures, calls, sum(a["in_flight"] for a in answers)

    async def collect(self, timeout: float) -> tuple[list[float], int, Counter[str]]:
        answers = await self._ask("collect", timeout)
        returned = [t for a in answers for t in a["returned"]]
        calls: Counter[str] = sum((a["calls"] for a in answers), Counter())
        return returned, sum(a["failures"] for a in answers), calls

    def stop(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(("stop", None))
        for proc in self._procs:
            proc.join(20)
            if proc.is_alive():
                proc.terminate()
                proc.join(10)


# -- (b), (c): wake latency against a 10 ms poller

# Ends a job; returns (issued, returned): the commit happened between the two.
Ender = Callable[[str], Awaitable[tuple[float, float]]]


def cancel_through(client: SetuClient) -> Ender:
    async def end(job_id: str) -> tuple[float, float]:
        issued = now()
        await client.cancel_job(job_id, "bench")
        return issued, now()

    return end


def commit_on(pool: asyncpg.Pool) -> Ender:
    async def end(job_id: str) -> tuple[float, float]:
        issued = now()
        await end_jobs(pool, [job_id])
        return issued, now()

    return end


@dataclass
class Wakes:
    from_return: list[float] = field(default_factory=list)
    from_issue: list[float] = field(default_factory=list)
    rpcs: int = 0
    seconds_waiting: float = 0.0

    def add(self, ended: tuple[float, float], seen: float) -> None:
        self.from_issue.append(seen - ended[0])
        self.from_return.append(seen - ended[1])

    @property
    def rpcs_per_minute(self) -> float:
        return self.rpcs / self.seconds_waiting * 60


async def waiter_rounds(waiter: CountingClient, end: Ender, job_ids: list[str]) -> Wakes:
    wakes = Wakes()
    calls_before = waiter.wait_call_count

    async def wait(job_id: str) -> float:
        await waiter.wait_for_job(job_id)
        return now()

    for job_id in job_ids:
        started = now()
        waiting = asyncio.create_task(wait(job_id))
        await asyncio.sleep(PARK_PACING)
        if waiting.done():
            raise RuntimeError(f"wait_for_job returned before job {job_id} ended")
        ended = await end(job_id)
        seen = await waiting
        wakes.add(ended, seen)
        wakes.seconds_waiting += seen - started
    wakes.rpcs = waiter.wait_call_count - calls_before
    return wakes


async def poller_rounds(poller: SetuClient, end: Ender, job_ids: list[str]) -> Wakes:
    wakes = Wakes()

    async def poll(job_id: str) -> float:
        # Fixed-rate ticks, so the poller's rate is 100/s whatever the RTT.
        tick = started = now()
        while True:
            job = await poller.get_job(job_id)
            wakes.rpcs += 1
            if job.state in TERMINAL_STATES:
                seen = now()
                wakes.seconds_waiting += seen - started
                return seen
            tick += POLL_PERIOD
            await asyncio.sleep(max(0.0, tick - now()))

    for job_id in job_ids:
        polling = asyncio.create_task(poll(job_id))
        # A random phase between the poll ticks and the commit, as in life.
        await asyncio.sleep(PARK_PACING + random.uniform(0, POLL_PERIOD))
        ended = await end(job_id)
        wakes.add(ended, await polling)
    return wakes


def report_wakes(report: Report, name: str, wakes: Wakes) -> None:
    report.add(f"{name}: from return", latency(wakes.from_return))
    report.add(f"{name}: from issue", latency(wakes.from_issue))


def report_rpc_cost(report: Report, waits: Wakes, polls: Wakes) -> bool:
    per_wait = waits.rpcs / len(waits.from_return)
    # A parked wait costs one WaitJob per cap; measured: calls per wait here.
    wait_rate = per_wait * 60 / PRODUCTION_WAIT_CAP_SECONDS
    ratio = polls.rpcs_per_minute / wait_rate
    report.add(
        "WaitJob RPCs per waiting job",
        f"{per_wait:.2f} per wait measured -> {wait_rate:.2f}/min at the 60 s cap",
    )
    report.add("10 ms poller RPCs per waiting job", f"{polls.rpcs_per_minute:.0f}/min measured")
    report.add("RPC ratio poller / WaitJob", f"{ratio:.0f}x", ">= 100x", ratio >= 100)
    return ratio >= 100


# -- (a): memory and short calls with waits parked


async def short_calls(
    a: SetuClient, b: SetuClient, job_id: str, n: int
) -> tuple[list[float], list[float]]:
    """n GetJob calls to A, each followed by one to B as a control: B holds no
    waits, so when both slow down it is the machine, not the parked waits."""
    seconds: tuple[list[float], list[float]] = ([], [])
    for i in range(n + 20):
        for client, out in zip((a, b), seconds, strict=True):
            started = now()
            await client.get_job(job_id)
            if i >= 20:  # the first ones warm the channels and code paths
                out.append(now() - started)
    return seconds


async def park(
    workers: Workers, pool: asyncpg.Pool, ws: uuid.UUID, server: Server, total: int, n: int
) -> tuple[list[str], float, float, Counter[str]]:
    """Park n more waits, to `total`; returns their jobs, seconds until all
    are parked, the server CPU seconds spent, and the WaitJob calls so far."""
    ids = await new_jobs(pool, ws, n)
    cpu_before = cpu_seconds(server.ps)
    started = now()
    await workers.park(ids)
    while True:
        await until_quiet([server.ps, *workers.processes])
        returned, failures, calls, in_flight = await workers.status()
        if returned or failures:
            raise RuntimeError(f"{returned} waits returned, failures: {failures}")
        if in_flight == total:
            break
        # A quiet wait may be sleeping before a retry (the SDK backs off up to
        # 10 s) rather than parked: wait until every wait is inside a call.
        progress(f"{total - in_flight} waits between retries; waiting for them")
    elapsed = now() - started
    return ids, elapsed, cpu_seconds(server.ps) - cpu_before, calls


async def memory_and_short_calls(
    report: Report,
    args: argparse.Namespace,
    servers: tuple[Server, Server],
    clients: tuple[SetuClient, SetuClient],
    key: str,
    pool: asyncpg.Pool,
    ws: uuid.UUID,
) -> None:
    server = servers[0]
    report.section(
        f"(a) server A memory and GetJob latency, waits parked on A; B idle as a control; "
        f"{args.client_procs} client processes x {args.channels} long-poll channels"
    )
    probe = (await new_jobs(pool, ws, 1))[0]
    await until_quiet([s.ps for s in servers])
    idle_rss = rss(server.ps)
    idle, idle_b = await short_calls(*clients, probe, args.short_calls)
    report.add("RSS idle (after the wake rounds)", f"{idle_rss / MIB:.1f} MiB")
    report.add("GetJob idle, A", latency(idle))
    report.add("GetJob idle, B (control)", latency(idle_b))
    if not args.parked:
        return

    workers = Workers(server.target, key, args.client_procs, args.channels)
    try:
        parked: list[str] = []
        for total in args.parked:
            progress(f"parking {total - len(parked)} more waits on A (to {total})")
            more = total - len(parked)
            ids, seconds, cpu, calls = await park(workers, pool, ws, server, total, more)
            parked += ids
            held = rss(server.ps)
            busy, busy_b = await short_calls(*clients, probe, args.short_calls)
            grown = held - idle_rss
            last = total == args.parked[-1]
            report.add(
                f"park {len(ids):,} more: time to quiet / A's CPU",
                f"{seconds:.1f} s / {cpu:.1f} s ({cpu / len(ids) * 1e6:.0f} us per wait)",
            )
            report.add(f"WaitJob calls so far ({total:,} parked)", outcomes(calls))
            report.add(
                f"RSS with {total:,} parked",
                f"{held / MIB:.1f} MiB (+{grown / MIB:.1f} MiB, "
                f"{grown / total / 1024:.1f} KiB per wait)",
                "<= 1024 MiB" if total >= TARGET_PARKED else "",
                held <= 1024 * MIB if total >= TARGET_PARKED else None,
            )
            ratio = p50(busy) / p50(idle)
            report.add(
                f"GetJob with {total:,} parked, A",
                latency(busy) + f"; p50 {ratio:.2f}x idle",
                "p50 <= 1.5x idle" if last else "",
                ratio <= 1.5 if last else None,
            )
            report.add(
                "GetJob meanwhile, B (control)",
                latency(busy_b) + f"; p50 {p50(busy_b) / p50(idle_b):.2f}x idle",
            )
        report.add("A's peak RSS (VmHWM)", f"{peak_rss(server.ps) / MIB:.1f} MiB")
        held_by_clients = sum(rss(p) for p in workers.processes)
        report.add("client workers' RSS", f"{held_by_clients / MIB:.1f} MiB in all")
        await release(report, workers, pool, parked)
    finally:
        workers.stop()


async def release(report: Report, workers: Workers, pool: asyncpg.Pool, ids: list[str]) -> None:
    progress(f"ending all {len(ids)} parked jobs in one statement")
    issued = now()
    await end_jobs(pool, ids)
    committed = now()
    returned, failures, calls = await workers.collect(timeout=300)
    report.add(
        f"release: one commit ends {len(ids):,} jobs",
        f"{len(returned):,} returned, {failures} failed",
    )
    report.add("release: WaitJob calls in all", outcomes(calls))
    if not returned:
        return
    report.add("release: statement took", f"{(committed - issued) * 1000:.0f} ms")
    report.add("release: commit -> each wait returns", latency([t - committed for t in returned]))
    report.add("release: last answer after the commit", f"{max(returned) - committed:.2f} s")
    # The notifications carry each job's snapshot: the hub wakes waiters
    # from them with no read, so the last answer should follow the statement
    # closely (issue 17: within 2x the statement's own time).
    statement, last = committed - issued, max(returned) - issued
    report.add(
        "release: last answer / the ending statement",
        f"{last:.2f} s / {statement:.2f} s = {last / statement:.2f}x",
        "<= 2x, no failure",
        last <= 2 * statement and failures == 0 and len(returned) == len(ids),
    )


# -- the old in-process burst


async def burst(
    report: Report, client: SetuClient, pool: asyncpg.Pool, ws: uuid.UUID, n: int
) -> None:
    ids = await new_jobs(pool, ws, n)
    returned: list[float] = []

    async def wait(job_id: str) -> None:
        await client.wait_for_job(job_id)
        returned.append(now())

    tasks = [asyncio.create_task(wait(i)) for i in ids]
    # Benchmark pacing: give the burst time to park on the server.
    await asyncio.sleep(max(2.0, n / 1000))
    await end_jobs(pool, ids)
    committed = now()
    await asyncio.gather(*tasks)
    report.section(f"burst (in-process): {n:,} waits on A, one commit")
    report.add("commit -> each wait_for_job returns", latency([r - committed for r in returned]))
    report.add("commit -> all answered", f"{max(returned) - committed:.3f} s")


# -- --through-proxy: long-polls through nginx

PROXY_ROUTES: dict[str, float | None] = {"60 s": 60.0, "15 s": 15.0}


async def parked_calls(
    client: CountingClient, pool: asyncpg.Pool, ws: uuid.UUID, waits: int, seconds: float
) -> tuple[float, Counter[str]]:
    """`waits` jobs waited on for `seconds`, then ended: WaitJob calls per
    waiting job per minute, and every call's outcome."""
    ids = await new_jobs(pool, ws, waits)
    before = Counter(client.wait_calls)
    started = now()
    tasks = [asyncio.create_task(client.wait_for_job(i)) for i in ids]
    await asyncio.sleep(seconds)  # benchmark pacing: the time the jobs stay waited on
    await end_jobs(pool, ids)
    await asyncio.gather(*tasks)
    elapsed = now() - started
    calls = client.wait_calls - before
    return sum(calls.values()) / waits / elapsed * 60, calls


async def through_proxy(
    args: argparse.Namespace, report: Report, cleanup: contextlib.AsyncExitStack
) -> None:
    from tests.topology import running_nginx

    url, _ = database(cleanup)
    pool, ws, key = await bench_workspace(url, cleanup)
    server = start_server("A", url, wait_cap=PRODUCTION_WAIT_CAP_SECONDS)
    cleanup.callback(stop_process, server.process)
    port = int(server.target.rsplit(":", 1)[1])
    proxy = cleanup.enter_context(running_nginx(PROXY_ROUTES, upstream_port=port))
    report.section(
        f"--through-proxy: nginx ({proxy.log_path.parent}) in front of setu-server pid "
        f"{server.process.pid}, WaitJob cap {PRODUCTION_WAIT_CAP_SECONDS:g} s, SDK defaults, "
        f"{os.cpu_count()} cores, {load()}"
    )
    routes = [("direct", server.target)] + [
        (f"nginx grpc_read_timeout {name}", proxy.target(name)) for name in PROXY_ROUTES
    ]
    for name, target in routes:
        client = CountingClient(target, key, long_poll_seconds=None)
        cleanup.push_async_callback(client.close)
        await wait_up(client, server)
        progress(f"{name}: {args.rounds} wake rounds")
        wakes = await waiter_rounds(client, commit_on(pool), await new_jobs(pool, ws, args.rounds))
        report.section(f"{name} ({target})")
        report_wakes(report, "wake latency, commit on the database", wakes)
        if args.proxy_waits:
            progress(f"{name}: {args.proxy_waits} waits held {args.proxy_seconds:g} s")
            rate, calls = await parked_calls(client, pool, ws, args.proxy_waits, args.proxy_seconds)
            report.add(
                "WaitJob calls per waiting job per minute",
                f"{rate:.2f} ({args.proxy_waits} jobs waited on {args.proxy_seconds:g} s)",
            )
            report.add("their outcomes", outcomes(calls))
        learned = client.long_polls.cut
        report.add(
            "window the SDK settled on",
            f"{client.long_polls.shortened:g} s"
            + (f" (cut learned at ~{learned:g} s)" if learned else " (no cut seen)")
            + "; a parked wait then costs one call per window less the server's 1 s: "
            f"{60 / (client.long_polls.shortened - 1):.2f}/min",
        )
    report.section(f"end: {load()}")


# -- main


async def main(args: argparse.Namespace) -> None:
    report = Report()
    async with contextlib.AsyncExitStack() as cleanup:
        try:
            if args.through_proxy:
                await through_proxy(args, report, cleanup)
            else:
                await run(args, report, cleanup)
        finally:
            if report.rows:
                report.print()


async def run(args: argparse.Namespace, report: Report, cleanup: contextlib.AsyncExitStack) -> None:
    url, embedded = database(cleanup)
    pool, ws, key = await bench_workspace(url, cleanup)

    a = start_server("A", url)
    cleanup.callback(stop_process, a.process)
    b = start_server("B", url)
    cleanup.callback(stop_process, b.process)
    client_a = CountingClient(a.target, key)
    cleanup.push_async_callback(client_a.close)
    client_b = CountingClient(b.target, key)
    cleanup.push_async_callback(client_b.close)
    await wait_up(client_a, a)
    await wait_up(client_b, b)
    where = "embedded" if embedded else url
    progress(f"servers A pid {a.process.pid}, B pid {b.process.pid}; PostgreSQL {where}")
    report.section(
        f"setu-server A pid {a.process.pid}, B pid {b.process.pid}, PostgreSQL {where}, "
        f"wait cap {WAIT_CAP_SECONDS} s, {os.cpu_count()} cores, {load()}"
    )

    progress(f"(b) wake latency on A, {args.rounds} rounds each")
    report.section(
        f"(b) wake latency on one server (A), one waiter at a time, {args.rounds} rounds"
    )
    rounds = args.rounds
    local = await waiter_rounds(
        client_a, cancel_through(client_a), await new_jobs(pool, ws, rounds)
    )
    by_db = await waiter_rounds(client_a, commit_on(pool), await new_jobs(pool, ws, rounds))
    polled = await poller_rounds(
        client_a, cancel_through(client_a), await new_jobs(pool, ws, rounds)
    )
    report_wakes(report, "WaitJob, CancelJob via A", local)
    report_wakes(report, "WaitJob, commit on the database", by_db)
    report_wakes(report, "10 ms poller, CancelJob via A", polled)
    good = p50(local.from_return) <= 2 and p99(local.from_return) <= 10
    report.add(
        "WaitJob via A vs target",
        f"p50 {p50(local.from_return):.2f} ms, p99 {p99(local.from_return):.2f} ms",
        "p50 <= 2 ms, p99 <= 10 ms",
        good,
    )
    beats = all(
        f(local.from_return) < f(polled.from_return) and f(local.from_issue) < f(polled.from_issue)
        for f in (p50, p99)
    )
    report.add("WaitJob faster than the poller", "p50 and p99, both timings", "yes", beats)
    report_rpc_cost(report, local, polled)

    progress(f"(c) wake latency across servers, {rounds} rounds each")
    report.section(f"(c) across servers: wait on B, CancelJob via A, {rounds} rounds")
    remote = await waiter_rounds(
        client_b, cancel_through(client_a), await new_jobs(pool, ws, rounds)
    )
    remote_polled = await poller_rounds(
        client_b, cancel_through(client_a), await new_jobs(pool, ws, rounds)
    )
    report_wakes(report, "WaitJob on B, CancelJob via A", remote)
    report_wakes(report, "10 ms poller on B, CancelJob via A", remote_polled)
    report.add(
        "WaitJob on B vs target",
        f"p99 {p99(remote.from_return):.2f} ms",
        "p99 <= 25 ms",
        p99(remote.from_return) <= 25,
    )

    await memory_and_short_calls(report, args, (a, b), (client_a, client_b), key, pool, ws)

    if args.waiters:
        progress(f"in-process burst of {args.waiters}")
        await burst(report, client_a, pool, ws, args.waiters)
    report.section(f"end: {load()}")


def totals(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip() and int(v) > 0]
    if values != sorted(set(values)):
        raise argparse.ArgumentTypeError("--parked takes increasing totals, e.g. 10000,50000")
    return values


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=300, help="wake rounds per variant")
    parser.add_argument(
        "--parked",
        type=totals,
        default=[10_000],
        help="increasing totals (10000,50000 for the target); 0 skips (a)",
    )
    parser.add_argument("--short-calls", type=int, default=500, help="GetJob calls per sample")
    parser.add_argument("--client-procs", type=int, default=2, help="processes holding the waits")
    parser.add_argument("--channels", type=int, default=4, help="long-poll channels per process")
    parser.add_argument("--waiters", type=int, default=2000, help="in-process burst; 0 skips")
    parser.add_argument(
        "--through-proxy",
        action="store_true",
        help="only the long-polls through nginx at 60 s and 15 s grpc_read_timeout",
    )
    parser.add_argument(
        "--proxy-waits", type=int, default=20, help="--through-proxy: jobs waited on; 0 skips"
    )
    parser.add_argument(
        "--proxy-seconds",
        type=float,
        default=120.0,
        help="--through-proxy: how long those jobs stay waited on",
    )
    asyncio.run(main(parser.parse_args()))
