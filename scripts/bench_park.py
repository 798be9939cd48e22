"""Parked WaitJobs next to the bare grpc floor, in one run: memory per park
and how late the server's event loop runs while they park and are released.

    python scripts/bench_park.py [--parked 10000] [--profile]

- floor: `bench_grpc_floor.py --serve`, a bare grpc.aio server whose handler
  only awaits an event; --parked unary calls parked on it, each with the
  same shape as a WaitJob (an authorization header, a UUID in the request);
  RSS grown per call.
- setu: a setu-server (this script with --serve: the real `serving()` and the
  startup GC tuning of `serve_until_signalled`, plus a probe task that
  records how late a 10 ms timer fires) with --parked WaitJob calls parked on
  distinct RUNNING jobs; RSS grown per wait, then one statement ends every
  job and the probe covers the release until the last call has answered.
- --profile: the server also runs tracemalloc, and prints the lines that
  allocated most between idle and parked (tracemalloc itself costs memory
  and time, so the RSS figures of a profiled run are not the targets').

Both servers are parked from this process over 4 channels, with the same
client code, so client-side costs are the same and not counted. Targets
(issue 17): Setu's own ≤ 3 KiB per park above the floor (growth ≤ 1.15 x
the floor's); loop lag p99.9 ≤ 50 ms, max ≤ 200 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from collections.abc import Awaitable
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(command: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command)


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
    """How late a 10 ms timer fires, sample by sample."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        # The collector's pauses, by generation: (count, longest seconds).
        self.collections: dict[int, tuple[int, float]] = {}
        self._collecting = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._collecting = time.perf_counter()
            return
        count, longest = self.collections.get(info["generation"], (0, 0.0))
        took = time.perf_counter() - self._collecting
        self.collections[info["generation"]] = (count + 1, max(longest, took))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(PROBE_PERIOD)
            self.lags.append(loop.time() - started - PROBE_PERIOD)

    def take(self) -> dict[str, Any]:
        lags, self.lags = sorted(self.lags), []
        collections, self.collections = self.collections, {}
        if not lags:
            return {"n": 0, "p50": 0.0, "p999": 0.0, "max": 0.0, "gc": ""}
        return {
            "gc": ", ".join(
                f"gen{g} x{n} (longest {longest * 1000:.0f} ms)"
                for g, (n, longest) in sorted(collections.items())
            ),
            "n": len(lags),
            "p50": statistics.median(lags) * 1000,
            "p999": lags[min(len(lags) - 1, int(0.999 * len(lags)))] * 1000,
            "max": lags[-1] * 1000,
        }


async def serve(profile: bool) -> None:
    from setu_server.config import Settings
    from setu_server.server import serving, tune_gc

    if profile:
        import tracemalloc

        tracemalloc.start(10)
    settings = Settings.from_env()
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with serving(settings) as running:
        tune_gc()
        probe = Probe()
        probing = asyncio.create_task(probe.run())
        baseline: Any = None
        print(json.dumps({"port": running.port}), flush=True)
        while line := (await reader.readline()).decode().strip():
            answer: dict[str, Any] = {}
            if line == "watched":
                answer = {"watched": running.hub.watched}
            elif line == "lag":
                answer = probe.take()
            elif line == "snapshot" and profile:
                gc.collect()
                baseline = tracemalloc.take_snapshot()
            elif line == "diff" and profile:
                gc.collect()
                answer = {"top": top_allocations(baseline, tracemalloc.take_snapshot())}
            print(json.dumps(answer), flush=True)
        probing.cancel()


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
    """The --serve process, spoken to over its stdin and stdout."""

    def __init__(self, env: dict[str, str], profile: bool) -> None:
        command = [sys.executable, __file__, "--serve"] + (["--profile"] if profile else [])
        self.process = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT
        )
        self.ps = psutil.Process(self.process.pid)

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"setu-server exited with {self.process.wait()}")
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


async def floor(parked: int) -> dict[str, float]:
    port = free_port()
    script = ROOT / "scripts" / "bench_grpc_floor.py"
    process = spawn([sys.executable, str(script), "--serve", str(port)])
    ps = psutil.Process(process.pid)
    chans = channels(port)
    try:
        stubs = [health_pb2_grpc.HealthStub(c) for c in chans]
        now = health_pb2.HealthCheckRequest(service="now")
        for stub in stubs:
            await stub.Check(now, wait_for_ready=True, timeout=30)
        await until_quiet(ps)
        base = rss(ps)
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
        for call in calls:
            call.cancel()
        return {"base": base, "held": held, "per": (held - base) / parked}
    finally:
        for c in chans:
            await c.close()
        process.kill()
        process.wait()


# -- setu


async def setu(url: str, parked: int, profile: bool, report: list[str]) -> dict[str, float]:
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
    }
    child = Child(env, profile)
    chans = channels(port)
    try:
        await asyncio.to_thread(child.read)  # listening
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
        await child.ask("lag")  # forget the startup's samples
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
        await until_quiet(child.ps)
        held = rss(child.ps)
        parking_lag = await child.ask("lag")
        if profile:
            top = (await child.ask("diff"))["top"]
            report.append(f"tracemalloc, top lines grown from idle to {parked:,} parked:")
            report += ["  " + line for line in top]
        started = time.monotonic()
        await jobs.transition_jobs(pool, ids, JobState.SUCCEEDED, now=None, message="done")
        statement = time.monotonic() - started
        answers = await asyncio.gather(*calls, return_exceptions=True)
        last = time.monotonic() - started
        release_lag = await child.ask("lag")
        bad = [a for a in answers if isinstance(a, BaseException) or not a.terminal]
        return {
            "base": base,
            "held": held,
            "per": (held - base) / parked,
            "statement": statement,
            "last": last,
            "bad": len(bad),
            "park_lag": parking_lag,  # type: ignore[dict-item]
            "release_lag": release_lag,  # type: ignore[dict-item]
        }
    finally:
        for c in chans:
            await c.close()
        child.stop()
        await pool.close()


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


def lag_line(what: str, lag: dict[str, Any]) -> str:
    met = lag["p999"] <= 50 and lag["max"] <= 200
    return (
        f"loop lag {what}: p50 {lag['p50']:.1f} ms, p99.9 {lag['p999']:.1f} ms, "
        f"max {lag['max']:.1f} ms (n={lag['n']:,}); target p99.9 <= 50, max <= 200: "
        f"{'MET' if met else 'NOT MET'}\n  collections meanwhile: {lag['gc'] or 'none'}"
    )


async def measure(args: argparse.Namespace) -> None:
    n = args.parked
    report: list[str] = []
    with contextlib.ExitStack() as stack:
        url = database(stack)
        bare = await floor(n)
        ours = await setu(url, n, args.profile, report)
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
    print(lag_line(f"while {n:,} park", ours["park_lag"]))  # type: ignore[arg-type]
    print(
        f"release: one statement ends {n:,} jobs in {ours['statement'] * 1000:.0f} ms; "
        f"last answer {ours['last']:.2f} s after it began; {ours['bad']} bad answers"
    )
    print(lag_line("during the release", ours["release_lag"]))  # type: ignore[arg-type]
    if args.profile:
        print("(profiled run: tracemalloc inflates RSS and lag; judge the targets without it)")
    for line in report:
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parked", type=int, default=10_000)
    parser.add_argument("--profile", action="store_true", help="tracemalloc in the server")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.profile))
        return
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
