"""Parked WaitJobs next to the bare grpc floor, in one run: memory per park
and how late the server's event loop runs while they park and are released.

    python scripts/bench_park.py [--parked 20000] [--rounds 1] [--profile]
        [--cprofile FILE] [--recheck-seconds 30]

- floor: the bare grpc.aio server of `bench_grpc_floor.py` (its handler only
  awaits an event; this script with --serve-floor, with Setu's startup GC
  tuning and the same loop probe); --parked unary calls parked on it, each
  with the same shape as a WaitJob (an authorization header, a UUID in the
  request); RSS grown per call, and how late its loop ran meanwhile.
- setu: a setu-server (this script with --serve: the real `serving()` and the
  startup GC tuning of `serve_until_signalled`, plus a probe task that
  records how late a 10 ms timer fires) with --parked WaitJob calls parked on
  distinct RUNNING jobs; RSS grown per wait, then one statement ends every
  job. The probe's figures come in three windows: while the calls park,
  during the statement (idle until its commit, then the storm's start: the
  commit lands before the statement has handed back its 50,000 rows), and
  from then until the last call has answered.
- the machine: a process that runs only the probe (--serve-idle), over the
  same windows. Other processes share the cores, so part of any lag is
  time spent waiting for one; each lag line also bounds how much of it the
  loop's own CPU work explains (the loop thread's CPU time in the sample;
  grpc's own threads and the other processes get the rest of the cores).
- the re-check: once every call has parked, the server runs one pass of the
  watch hub's periodic re-check of every watched job (`WatchHub.run_once`,
  the safety net for lost notifications) inside the parking window, and the
  bench prints how long it took and how many rows came back; the periodic
  ones (every --recheck-seconds, SETU_WATCH_RECHECK_SECONDS) are counted too.
- --cprofile FILE: cProfile of the server's loop thread from the statement
  to the last answer (pstats format), to see what each answer costs.
- the last lines are issue 27's TABLE rows (the release against its
  statement, the loop's lag through the storm), medians of --rounds rounds.
- --profile: the server also runs tracemalloc, and prints the lines that
  allocated most between idle and parked (tracemalloc itself costs memory
  and time, so the RSS figures of a profiled run are not the targets').

Both servers are parked from this process over 4 channels, with the same
client code, so client-side costs are the same and not counted. Targets
(issue 17): Setu's own ≤ 3 KiB per park above the floor (growth ≤ 1.15 x
the floor's); loop lag p99.9 ≤ 50 ms, max ≤ 200 ms while parking and
through the release; the last answer ≤ 2 x the ending statement's time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from setu_client._proto.setu.v1 import jobs_pb2, jobs_pb2_grpc  # noqa: E402

KIB = 1024
MIB = 1024 * 1024
CHANNELS = 4
PROBE_PERIOD = 0.010
WAIT_CAP_SECONDS = 3600
TIMES = "\u00d7"  # the table's multiplication sign
# Issue 27: the last answer <= 2 x the statement; the lag p99.9 <= 50 ms.
RELEASE_TARGET = 2.0
LAG_TARGET_MS = 50.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss(process: psutil.Process) -> int:
    return int(process.memory_info().rss)


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def until_quiet(process: psutil.Process, windows: int = 3) -> None:
    """Parked once the server has used under 5 % of a core for 3 x 0.5 s."""
    quiet, last = 0, cpu(process)
    while quiet < windows:
        await asyncio.sleep(0.5)
        current = cpu(process)
        quiet = quiet + 1 if current - last < 0.025 else 0
        last = current


def channels(port: int) -> list[grpc.aio.Channel]:
    return [
        grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.channel_pool_index", i)])
        for i in range(CHANNELS)
    ]


async def gather_in_batches(calls: list[Awaitable[Any]], size: int = 2000) -> None:
    for i in range(0, len(calls), size):
        await asyncio.gather(*calls[i : i + size])


# -- the server side (--serve): a real setu-server with a loop-lag probe


class Probe:
    """How late a 10 ms timer fires, sample by sample, and how much of that
    the loop's own work can explain: the CPU time the loop's thread used in
    the sample (`time.thread_time`). On a machine whose cores other
    processes share, the rest of a lag is time spent waiting for a core."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.own: list[float] = []
        # The collector's pauses, by generation: (count, longest seconds,
        # longest CPU seconds).
        self.collections: dict[int, tuple[int, float, float]] = {}
        self._collecting = (0.0, 0.0)
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._collecting = (time.perf_counter(), time.thread_time())
            return
        count, longest, longest_cpu = self.collections.get(info["generation"], (0, 0.0, 0.0))
        took = time.perf_counter() - self._collecting[0]
        cpu = time.thread_time() - self._collecting[1]
        self.collections[info["generation"]] = (
            count + 1,
            max(longest, took),
            max(longest_cpu, cpu),
        )

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started, cpu = loop.time(), time.thread_time()
            await asyncio.sleep(PROBE_PERIOD)
            lag = loop.time() - started - PROBE_PERIOD
            self.lags.append(lag)
            self.own.append(min(lag, time.thread_time() - cpu))

    def take(self) -> dict[str, Any]:
        lags, self.lags = sorted(self.lags), []
        own, self.own = sorted(self.own), []
        collections, self.collections = self.collections, {}
        if not lags:
            nothing = ("p50", "p999", "max", "own_p999", "own_max")
            return {"n": 0, "gc": ""} | dict.fromkeys(nothing, 0.0)
        return {
            "gc": ", ".join(
                f"gen{g} x{n} (longest {longest * 1000:.0f} ms, {cpu * 1000:.0f} ms of CPU)"
                for g, (n, longest, cpu) in sorted(collections.items())
            ),
            "n": len(lags),
            "p50": statistics.median(lags) * 1000,
            "p999": _p999(lags) * 1000,
            "max": lags[-1] * 1000,
            "own_p999": _p999(own) * 1000,
            "own_max": own[-1] * 1000,
        }


def _p999(ordered: list[float]) -> float:
    return ordered[min(len(ordered) - 1, int(0.999 * len(ordered)))]


async def commands() -> asyncio.StreamReader:
    """This child's stdin, where the bench sends one command a line."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def serve_floor() -> None:
    """The floor of bench_grpc_floor.py (a bare grpc.aio server whose handler
    awaits an event), with Setu's startup GC tuning and the same probe: how
    late grpc alone makes a timer while the calls park."""
    from bench_grpc_floor import SERVER_OPTIONS, Parking

    from setu_server.server import tune_gc

    reader = await commands()
    server = grpc.aio.server(options=SERVER_OPTIONS)
    parking = Parking()
    health_pb2_grpc.add_HealthServicer_to_server(parking, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    tune_gc()

    def handle(line: str) -> dict[str, Any]:
        if line == "release":  # every parked call answers: grpc's own cost of a storm
            parking.release.set()
        return {}

    await answer(reader, {"port": port}, handle)
    await server.stop(None)


async def serve_idle() -> None:
    """A process that runs only the probe: how late this machine's scheduler
    alone makes a timer (other sessions share its cores)."""
    await answer(await commands(), {}, lambda line: {})


async def answer(
    reader: asyncio.StreamReader, ready: dict[str, Any], handle: Callable[[str], dict[str, Any]]
) -> None:
    """Probe the loop; say `ready`; answer commands until stdin closes."""
    probe = Probe()
    probing = asyncio.create_task(probe.run())
    print(json.dumps(ready), flush=True)
    while line := (await reader.readline()).decode().strip():
        print(json.dumps(probe.take() if line == "lag" else handle(line)), flush=True)
    probing.cancel()


async def serve(profile: bool, cprofile: str) -> None:
    from setu_server.config import Settings
    from setu_server.server import serving, tune_gc

    if profile:
        import tracemalloc

        tracemalloc.start(10)
    settings = Settings.from_env()
    reader = await commands()
    async with serving(settings) as running:
        tune_gc()
        baseline: Any = None
        hub = running.hub
        forced: dict[str, Any] = {}
        passes: list[asyncio.Task[None]] = []  # held, so none is collected mid-pass
        storm = cProfile.Profile()  # the loop's thread, from the statement to the last answer

        async def recheck() -> None:
            """One pass, with what it cost the loop: its thread's CPU time
            (the calls are parked and quiet, so little else runs) and how
            late a 10 ms timer fired meanwhile."""
            lags: list[float] = []
            ticking = asyncio.get_running_loop().create_task(tick(lags))
            started, cpu = time.monotonic(), time.thread_time()
            reads, fetched = hub.reads, hub.fetched
            await hub.run_once()
            forced.update(
                took=time.monotonic() - started,
                cpu=time.thread_time() - cpu,
                lag=max(lags, default=0.0),
                checked=hub.reads - reads,
                fetched=hub.fetched - fetched,
            )
            ticking.cancel()

        def handle(line: str) -> dict[str, Any]:
            nonlocal baseline
            if line == "watched":
                return {"watched": hub.watched}
            if line == "recheck":
                forced.clear()
                passes.append(asyncio.get_running_loop().create_task(recheck()))
            elif line == "rechecked":
                return {"passes": hub.rechecks, "forced": forced or None}
            elif line == "storm" and cprofile:
                storm.enable()
            elif line == "stormed" and cprofile:
                storm.disable()
                storm.dump_stats(cprofile)
            if line == "snapshot" and profile:
                gc.collect()
                baseline = tracemalloc.take_snapshot()
            elif line == "diff" and profile:
                gc.collect()
                return {"top": top_allocations(baseline, tracemalloc.take_snapshot())}
            return {}

        await answer(reader, {"port": running.port}, handle)


async def tick(lags: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(PROBE_PERIOD)
        lags.append(loop.time() - started - PROBE_PERIOD)


def top_allocations(before: Any, after: Any, n: int = 25) -> list[str]:
    stats = after.compare_to(before, "traceback")
    lines = []
    for stat in stats[:n]:
        frames = " <- ".join(
            f"{Path(f.filename).name}:{f.lineno}" for f in reversed(list(stat.traceback)[-5:])
        )
        lines.append(f"{stat.size_diff / KIB:10.0f} KiB {stat.count_diff:8d} blocks  {frames}")
    return lines


class Child:
    """A --serve, --serve-floor or --serve-idle process of this script, spoken
    to over its stdin and stdout."""

    def __init__(self, flags: list[str], env: dict[str, str] | None = None) -> None:
        self.flags = flags
        self.process = subprocess.Popen(
            [sys.executable, __file__, *flags],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        self.ps = psutil.Process(self.process.pid)

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{' '.join(self.flags)} exited with {self.process.wait()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command.encode() + b"\n")
        self.process.stdin.flush()
        return await asyncio.to_thread(self.read)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# -- the floor


async def floor(parked: int) -> dict[str, Any]:
    child = Child(["--serve-floor"])
    ps = child.ps
    port = int((await asyncio.to_thread(child.read))["port"])
    chans = channels(port)
    try:
        stubs = [health_pb2_grpc.HealthStub(c) for c in chans]
        now = health_pb2.HealthCheckRequest(service="now")
        for stub in stubs:
            await stub.Check(now, wait_for_ready=True, timeout=30)
        await until_quiet(ps)
        base = rss(ps)
        await child.ask("lag")  # forget the startup's samples
        # The same shape of call as a WaitJob: an authorization header and a
        # job id's worth of request, so grpc holds the same bytes for both.
        auth = (("authorization", f"Bearer setu_key_{secrets.token_urlsafe(32)}"),)
        calls = [
            stubs[i % CHANNELS].Check(
                health_pb2.HealthCheckRequest(service=str(uuid.uuid4())),
                metadata=auth,
                timeout=WAIT_CAP_SECONDS,
            )
            for i in range(parked)
        ]
        await until_quiet(ps)
        held = rss(ps)
        parking_lag = await child.ask("lag")
        started = time.monotonic()
        await child.ask("release")
        answers = await asyncio.gather(*calls, return_exceptions=True)
        release = time.monotonic() - started
        # grpc's own lag through a storm: the lag row's floor.
        release_lag = await child.ask("lag")
        bad = sum(isinstance(a, BaseException) for a in answers)
        return {
            "release_lag": release_lag,
            "base": base,
            "held": held,
            "per": (held - base) / parked,
            "park_lag": parking_lag,
            "release": release,
            "release_bad": bad,
        }
    finally:
        for c in chans:
            await c.close()
        child.stop()


# -- setu


async def setu(
    url: str,
    parked: int,
    profile: bool,
    recheck_seconds: float,
    report: list[str],
    cprofile: str = "",
) -> dict[str, Any]:
    from setu_client.clock import SystemClock
    from setu_server.models import JobState
    from setu_server.service.admin import AdminService
    from setu_server.store import db, jobs
    from setu_server.store.migrate import migrate

    conn = await db.connect(url)
    await migrate(conn)
    await conn.close()
    pool = await db.create_pool(url, max_size=4)
    admin = AdminService(pool, SystemClock())
    workspace = await admin.create_workspace(f"park-{uuid.uuid4().hex[:6]}")
    key = (await admin.create_api_key(workspace.id, "bench")).secret
    ids = [uuid.uuid4() for _ in range(parked)]
    await pool.executemany(
        "INSERT INTO job (id, workspace_id, kind, state, created_at, updated_at) "
        "VALUES ($1, $2, 'test', 'running', now(), now())",
        [(i, workspace.id) for i in ids],
    )
    port = free_port()
    env = os.environ | {
        "SETU_DATABASE_URL": url,
        "SETU_LISTEN": f"127.0.0.1:{port}",
        "SETU_LOG_LEVEL": "warning",
        "SETU_WAIT_CAP_SECONDS": str(WAIT_CAP_SECONDS),
        "SETU_WORKER_PROCESSES": "0",
        "SETU_HTTP_LISTEN": "",
        "SETU_WATCH_RECHECK_SECONDS": str(recheck_seconds),
        # One process: the figures are one event loop's (setu-server's
        # default is one process per core, SETU_PROCESSES=0).
        "SETU_PROCESSES": "1",
    }
    flags = ["--serve", *(["--profile"] if profile else [])]
    child = Child([*flags, *(["--cprofile", cprofile] if cprofile else [])], env)
    idle = Child(["--serve-idle"])
    chans = channels(port)
    try:
        await asyncio.to_thread(child.read)  # listening
        await asyncio.to_thread(idle.read)
        stubs = [jobs_pb2_grpc.JobOrchestrationServiceStub(c) for c in chans]
        auth = (("authorization", f"Bearer {key}"),)
        # Warm every channel and code path with calls that answer at once.
        for i, stub in enumerate(stubs):
            with contextlib.suppress(grpc.aio.AioRpcError):
                await stub.GetJob(jobs_pb2.GetJobRequest(job_id=str(ids[i])), metadata=auth)
        await until_quiet(child.ps)
        if profile:
            await child.ask("snapshot")
        base = rss(child.ps)
        for process in (child, idle):
            await process.ask("lag")  # forget the startup's samples
        passes = (await child.ask("rechecked"))["passes"]
        calls = [
            stubs[i % CHANNELS].WaitJob(
                jobs_pb2.WaitJobRequest(job_id=str(job_id)),
                metadata=auth,
                timeout=WAIT_CAP_SECONDS,
            )
            for i, job_id in enumerate(ids)
        ]
        while (await child.ask("watched"))["watched"] < parked:  # noqa: ASYNC110
            await asyncio.sleep(0.5)
        recheck = await rechecked_once(child)
        await until_quiet(child.ps)
        recheck["passes"] = (await child.ask("rechecked"))["passes"] - passes
        held = rss(child.ps)
        lags = {"park_lag": await child.ask("lag"), "idle_park_lag": await idle.ask("lag")}
        if profile:
            top = (await child.ask("diff"))["top"]
            report.append(f"tracemalloc, top lines grown from idle to {parked:,} parked:")
            report += ["  " + line for line in top]
        if cprofile:
            await child.ask("storm")
        started = time.monotonic()
        await jobs.transition_jobs(pool, ids, JobState.SUCCEEDED, now=None, message="done")
        statement = time.monotonic() - started
        # The storm begins at the commit, which lands before the statement
        # has handed back its rows (one per job, decoded here): the first
        # window is the statement (idle, then the storm's first seconds), the
        # second the rest of the storm.
        lags["statement_lag"] = await child.ask("lag")
        await idle.ask("lag")
        answers = await asyncio.gather(*calls, return_exceptions=True)
        last = time.monotonic() - started
        lags["release_lag"] = await child.ask("lag")
        lags["idle_release_lag"] = await idle.ask("lag")
        if cprofile:
            await child.ask("stormed")
            report.append(f"cProfile of the server's loop thread through the storm: {cprofile}")
        bad = [a for a in answers if isinstance(a, BaseException) or not a.terminal]
        return {
            "base": base,
            "held": held,
            "per": (held - base) / parked,
            "statement": statement,
            "last": last,
            "bad": len(bad),
            "recheck": recheck,
            **lags,
        }
    finally:
        for c in chans:
            await c.close()
        child.stop()
        idle.stop()
        await pool.close()


async def rechecked_once(child: Child) -> dict[str, Any]:
    """One pass of the watch hub's periodic re-check, run now (every call
    parked, inside the parking window): its time, jobs checked, rows back."""
    await child.ask("recheck")
    while (forced := (await child.ask("rechecked"))["forced"]) is None:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    return dict(forced)


def database(stack: contextlib.ExitStack) -> str:
    url = os.environ.get("SETU_DATABASE_URL")
    if url:
        return url
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    folder = Path(tempfile.mkdtemp(prefix="setu-park-"))
    stack.callback(shutil.rmtree, folder, ignore_errors=True)
    server = pgserver.get_server(folder / "pg", cleanup_mode="delete")
    stack.callback(server.cleanup)
    return str(server.get_uri("postgres"))


def lag_figures(lag: dict[str, Any]) -> str:
    return (
        f"p50 {lag['p50']:.1f} ms, p99.9 {lag['p999']:.1f} ms, max {lag['max']:.1f} ms "
        f"(n={lag['n']:,})"
    )


def lag_line(what: str, lag: dict[str, Any], idle: dict[str, Any] | None = None) -> str:
    met = lag["p999"] <= 50 and lag["max"] <= 200
    line = (
        f"loop lag {what}: {lag_figures(lag)}; target p99.9 <= 50, max <= 200: "
        f"{'MET' if met else 'NOT MET'}\n  of which the loop's own CPU work, at most: "
        f"p99.9 {lag['own_p999']:.1f} ms, max {lag['own_max']:.1f} ms"
        f"\n  collections meanwhile: {lag['gc'] or 'none'}"
    )
    if idle is not None:
        line += f"\n  an idle process's 10 ms timer meanwhile (the machine): {lag_figures(idle)}"
    return line


async def measure(args: argparse.Namespace) -> None:
    """--rounds rounds, floor and Setu alternated; each round's figures, then
    the issue-27 TABLE rows from the medians."""
    n = args.parked
    rounds: list[tuple[dict[str, Any], dict[str, Any]]] = []
    with contextlib.ExitStack() as stack:
        url = database(stack)
        for i in range(args.rounds):
            report: list[str] = []
            bare = await floor(n)
            ours = await setu(url, n, args.profile, args.recheck_seconds, report, args.cprofile)
            rounds.append((bare, ours))
            if args.rounds > 1:
                print(f"-- round {i + 1} of {args.rounds}")
            print_round(args, bare, ours, report)
    print_table(n, rounds)


def print_table(n: int, rounds: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """The issue-27 rows: the release against its statement (bare grpc.aio's
    own answer time beside it), and the loop's lag through the storm."""
    median = statistics.median
    statement = median(ours["statement"] for _, ours in rounds)
    last = median(ours["last"] for _, ours in rounds)
    ratio = median(ours["last"] / ours["statement"] for _, ours in rounds)
    grpc_alone = median(bare["release"] for bare, _ in rounds)
    lag = median(ours["release_lag"]["p999"] for _, ours in rounds)
    idle = median(ours["idle_release_lag"]["p999"] for _, ours in rounds)
    grpc_lag = median(bare["release_lag"]["p999"] for bare, _ in rounds)
    own = median(ours["release_lag"]["own_p999"] for _, ours in rounds)
    of = f"median of {len(rounds)} round(s), load {os.getloadavg()[0]:.2f}"
    print(
        f"TABLE | release {n:,} parked waits in one statement (bench_park.py) | the statement "
        f"{statement:.2f} s; bare grpc.aio answers {n:,} in {grpc_alone:.2f} s | last answer "
        f"{last:.2f} s after the statement began ({of}) | {ratio:.2f} {TIMES} | "
        f"≤ {RELEASE_TARGET:g} {TIMES} | {'met' if ratio <= RELEASE_TARGET else 'missed'}"
    )
    print(
        f"TABLE | event-loop lag from the statement's return to the last answer | bare grpc.aio "
        f"answering its storm p99.9 {grpc_lag:.1f} ms; an idle process's timer p99.9 "
        f"{idle:.1f} ms | p99.9 {lag:.1f} ms (the loop's own CPU at most "
        f"{own:.1f} ms; {of}) | {lag / LAG_TARGET_MS:.2f} {TIMES} the target | "
        f"p99.9 ≤ {LAG_TARGET_MS:g} ms | {'met' if lag <= LAG_TARGET_MS else 'missed'}"
    )


def print_round(
    args: argparse.Namespace, bare: dict[str, Any], ours: dict[str, Any], report: list[str]
) -> None:
    n = args.parked
    own = (ours["per"] - bare["per"]) / KIB
    grown_ratio = (ours["held"] - ours["base"]) / (bare["held"] - bare["base"])
    print(f"parked calls: {n:,}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    print(
        f"floor (bare grpc.aio): {bare['per'] / KIB:.2f} KiB per park "
        f"(RSS {bare['base'] / MIB:.0f} -> {bare['held'] / MIB:.0f} MiB)"
    )
    print(
        f"setu WaitJob:          {ours['per'] / KIB:.2f} KiB per park "
        f"(RSS {ours['base'] / MIB:.0f} -> {ours['held'] / MIB:.0f} MiB)"
    )
    print(
        f"setu's own above the floor: {own:.2f} KiB per park (target <= 3): "
        f"{'MET' if own <= 3 else 'NOT MET'}"
    )
    print(
        f"growth for {n:,} parks: setu {grown_ratio:.3f} x the floor's "
        f"(target <= 1.15): {'MET' if grown_ratio <= 1.15 else 'NOT MET'}"
    )
    floor_lag = bare["park_lag"]
    print(
        f"loop lag of the floor (bare grpc.aio, Setu's GC tuning) while {n:,} park: "
        f"{lag_figures(floor_lag)}\n  collections meanwhile: {floor_lag['gc'] or 'none'}"
    )
    print(lag_line(f"while {n:,} park", ours["park_lag"], ours["idle_park_lag"]))
    recheck = ours["recheck"]
    print(
        f"  re-check of the watched jobs in that window: one pass run once all had parked, "
        f"{recheck['took'] * 1000:.0f} ms ({recheck['cpu'] * 1000:.0f} ms of the loop's CPU; "
        f"a 10 ms timer at most {recheck['lag'] * 1000:.1f} ms late meanwhile), "
        f"{recheck['checked']:,} jobs checked, {recheck['fetched']:,} rows back; "
        f"{recheck['passes']} pass(es) in all (periodic every {args.recheck_seconds:g} s)"
    )
    ratio = ours["last"] / ours["statement"]
    print(
        f"release: one statement ends {n:,} jobs in {ours['statement'] * 1000:.0f} ms; "
        f"last answer {ours['last']:.2f} s after it began ({ratio:.2f} x the statement, "
        f"target <= 2: {'MET' if ratio <= 2 else 'NOT MET'}); {ours['bad']} bad answers"
    )
    storm = ours["last"] - ours["statement"]
    print(
        f"  floor: bare grpc.aio answers {n:,} parked calls in {bare['release']:.2f} s from one "
        f"event ({bare['release_bad']} bad answers); Setu's answers ran on "
        f"{storm:.2f} s past the statement ({storm / bare['release']:.2f} x that floor). "
        f"So the target needs a statement of at least ~{bare['release']:.1f} s: "
        f"grpc alone spends {bare['release'] / n * 1e6:.0f} us per answer"
    )
    print(
        f"  bare grpc.aio's loop lag while it answers them: {lag_figures(bare['release_lag'])}"
        f"\n  collections meanwhile: {bare['release_lag']['gc'] or 'none'}"
    )
    print(lag_line("during the statement", ours["statement_lag"]))
    print(
        lag_line(
            "from the statement's return to the last answer",
            ours["release_lag"],
            ours["idle_release_lag"],
        )
    )
    if args.profile:
        print("(profiled run: tracemalloc inflates RSS and lag; judge the targets without it)")
    for line in report:
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parked", type=int, default=20_000)
    parser.add_argument(
        "--rounds", type=int, default=1, help="floor and setu alternated; TABLE rows of the medians"
    )
    parser.add_argument("--profile", action="store_true", help="tracemalloc in the server")
    parser.add_argument(
        "--cprofile",
        default="",
        metavar="FILE",
        help="cProfile the server's loop from the statement to the last answer, into FILE",
    )
    parser.add_argument(
        "--recheck-seconds",
        type=float,
        default=30.0,
        help="the server's periodic re-check of watched jobs (SETU_WATCH_RECHECK_SECONDS)",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-floor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-idle", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.profile, args.cprofile))
        return
    if args.serve_floor:
        sys.path.insert(0, str(ROOT / "scripts"))
        asyncio.run(serve_floor())
        return
    if args.serve_idle:
        asyncio.run(serve_idle())
        return
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
