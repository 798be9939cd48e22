"""The fixed cost of a small run: submit a 10-row run and wait for it, again
and again, cloud -> cloud and agent -> cloud (a real setu-agent process).

    python scripts/bench_small_run.py [--runs 200] [--rows 10]

One embedded PostgreSQL holds Setu's database, another the two data
databases (no connection may reach the socket folder of Setu's own); a
real setu-server (its own cloud workers) and a real setu-agent; the SDK
submits a run of a --rows table and calls wait_for_job until it ends,
--runs times in a row per flow. Printed: p50/p90 of submit -> wait_for_job
returned, and where that time goes, from the job's own event timestamps
(the server's clock): from the job's creation to each step's first event
(dispatch, the runtime's first word, extract done, load done, terminal),
then from terminal to the SDK's return; and a floor measured between the
runs (one GetJob on the same channel), with the run's p50 as a multiple of
it, since a shared machine's load moves every figure; and the data's own
floor (the same rows by binary COPY out of the source and, in one
transaction, TRUNCATE and COPY into a table of the destination database, on
open connections), so what remains above it is Setu's own cost. Targets (issue 17):
p50 <= 50 ms cloud -> cloud, <= 150 ms agent -> cloud.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from setu_client import SetuClient  # noqa: E402
from setu_client.clock import SystemClock  # noqa: E402
from setu_server.service.admin import AdminService  # noqa: E402
from setu_server.store import db  # noqa: E402
from setu_server.store.migrate import migrate  # noqa: E402

TARGETS_MS = {"cloud -> cloud": 50.0, "agent -> cloud": 150.0}

# Steps, by the first event whose message holds one of these (in order).
STEPS = (
    ("dispatched", ("Dispatched",)),
    ("leased", (" leased by ",)),
    ("extracted", ("Extract finished",)),
    ("load started", ("Copying directly", "Loading staged")),
    ("loaded", ("Loaded ",)),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def postgres_config(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    host = parse_qs(parts.query).get("host", [parts.hostname or "localhost"])[0]
    config: dict[str, Any] = {
        "host": host,
        "database": parts.path.lstrip("/"),
        "user": parts.username or "postgres",
    }
    if parts.port:
        config["port"] = parts.port
    return config


@contextlib.contextmanager
def embedded() -> Iterator[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    folder = Path(tempfile.mkdtemp(prefix="setu-small-"))
    server = pgserver.get_server(folder / "pg", cleanup_mode="delete")
    try:
        yield str(server.get_uri("postgres"))
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def process(module: str, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module], env=os.environ | env, stdout=out, stderr=out, cwd=ROOT
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def create_table(url: str, rows: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE small AS SELECT i AS id, md5(i::text) AS body, i * 1.5 AS amount "
            "FROM generate_series(1, $1) i",
            rows,
        )
        await conn.execute("ALTER TABLE small ADD PRIMARY KEY (id)")
    finally:
        await conn.close()


async def until_up(client: SetuClient, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            async with asyncio.timeout(2):
                [c async for c in client.list_connections()]
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def until_agent_online(client: SetuClient, agent_id: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while True:
        agents = [a async for a in client.list_agents()]
        if any(str(a.id) == agent_id and a.online for a in agents):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the agent did not come online")
        await asyncio.sleep(0.2)


async def timeline(client: SetuClient, job_id: str, created: Any) -> dict[str, float]:
    """Milliseconds from the job's creation to each step's first event."""
    events = [e async for e in client.job_events(job_id)]
    out: dict[str, float] = {}
    for step, prefixes in STEPS:
        for event in events:
            if event.created_at is not None and any(p in event.message for p in prefixes):
                out[step] = (event.created_at - created).total_seconds() * 1000
                break
    if events and events[-1].created_at is not None:
        out["terminal"] = (events[-1].created_at - created).total_seconds() * 1000
    return out


class DataFloor:
    """What the data itself costs, with nothing of Setu's: the same rows read
    by binary COPY from the source and written the way an overwrite does
    (one transaction: TRUNCATE, COPY in, COMMIT) on open connections."""

    def __init__(self, src: str, dst: str, table: str) -> None:
        self._urls = (src, dst)
        self._table = f"floor_{table}"

    async def __aenter__(self) -> DataFloor:
        self._src, self._dst = [await asyncpg.connect(u) for u in self._urls]
        await self._dst.execute(
            f"CREATE TABLE {self._table} (id integer PRIMARY KEY, body text, amount numeric)"
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._dst.execute(f"DROP TABLE {self._table}")
        await self._src.close()
        await self._dst.close()

    async def once(self) -> float:
        started = time.perf_counter()
        chunks: list[bytes] = []

        async def sink(chunk: bytes) -> None:
            chunks.append(chunk)

        await self._src.copy_from_query("SELECT * FROM small", output=sink, format="binary")
        async with self._dst.transaction():
            await self._dst.execute(f"TRUNCATE {self._table}")
            await self._dst.copy_to_table(
                self._table, source=_once(b"".join(chunks)), format="binary"
            )
        return (time.perf_counter() - started) * 1000


async def _once(data: bytes) -> Any:
    yield data


async def flow(
    client: SetuClient,
    name: str,
    pipeline: str,
    runs: int,
    samples: dict[str, Any],
    floor: DataFloor,
) -> None:
    totals: list[float] = []
    steps: dict[str, list[float]] = defaultdict(list)
    first_events: list[str] = []
    for i in range(runs + 3):  # three to warm caches and connections
        started = time.perf_counter()
        job = await client.submit_run(pipeline)
        submitted = time.perf_counter()
        outcome = await client.wait_for_job(job.id)
        returned = time.perf_counter()
        if outcome.state.name != "SUCCEEDED":
            raise RuntimeError(f"{name}: run {job.id} ended {outcome.state}: {outcome}")
        if i < 3:
            if i == 0:
                first_events = [e.message async for e in client.job_events(job.id)]
            continue
        totals.append((returned - started) * 1000)
        steps["submit (SDK call)"].append((submitted - started) * 1000)
        # The floor, in the same moment: one short call (GetJob) on the same
        # channel, so a loaded machine's figures can be read as round trips.
        floor_started = time.perf_counter()
        await client.get_job(job.id)
        steps["floor: one GetJob"].append((time.perf_counter() - floor_started) * 1000)
        steps["floor: the data alone"].append(await floor.once())
        marks = await timeline(client, job.id, job.created_at)
        for step, ms in marks.items():
            steps[f"created -> {step}"].append(ms)
    samples[name] = (totals, steps, first_events)


def report(
    name: str, totals: list[float], steps: dict[str, list[float]], events: list[str]
) -> None:
    ordered = sorted(totals)
    p50 = statistics.median(ordered)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    target = TARGETS_MS[name]
    floor = statistics.median(steps["floor: one GetJob"])
    data = statistics.median(steps["floor: the data alone"])
    print(
        f"{name}: {len(totals)} runs, submit -> wait_for_job returned: "
        f"p50 {p50:.1f} ms, p90 {p90:.1f} ms (target p50 <= {target:.0f} ms: "
        f"{'MET' if p50 <= target else 'NOT MET'}); floors: one GetJob p50 {floor:.2f} ms "
        f"(ratio {p50 / floor:.1f}x), the data alone p50 {data:.2f} ms "
        f"(Setu's own cost above it: {p50 - data:.1f} ms)"
    )
    for step, values in steps.items():
        print(f"  {step:<28} p50 {statistics.median(values):7.1f} ms  (n={len(values)})")
    print("  one run's events: " + " | ".join(events))


async def main(args: argparse.Namespace) -> None:
    # Setu's own database on a server of its own: no connection may reach
    # the socket folder of Setu's database, so the data has another server.
    with (
        embedded() as server_url,
        embedded() as data_url,
        tempfile.TemporaryDirectory(prefix="setu-small-") as tmp,
    ):
        folder = Path(tmp)
        for url, names in ((server_url, ("setu",)), (data_url, ("src", "dst"))):
            admin_conn = await asyncpg.connect(url)
            for name in names:
                await admin_conn.execute(f"CREATE DATABASE {name}")
            await admin_conn.close()
        setu_url = with_database(server_url, "setu")
        src, dst = (with_database(data_url, n) for n in ("src", "dst"))
        await create_table(src, args.rows)
        conn = await db.connect(setu_url)
        await migrate(conn)
        await conn.close()
        pool = await db.create_pool(setu_url, max_size=2)
        admin = AdminService(pool, SystemClock())
        workspace = await admin.create_workspace("small-runs")
        key = (await admin.create_api_key(workspace.id, "bench")).secret
        agent = await admin.create_agent(workspace.id, "bench agent")
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
        agent_env = {
            "SETU_SERVER": f"127.0.0.1:{port}",
            "SETU_AGENT_TOKEN": agent.secret,
            "SETU_LOG_LEVEL": "warning",
        }
        with (
            process("setu_server.main", server_env, folder / "server.log"),
            process("setu_agent.main", agent_env, folder / "agent.log"),
        ):
            async with SetuClient(f"127.0.0.1:{port}", key) as client:
                await until_up(client)
                await until_agent_online(client, str(agent.value.id))
                src_cloud = await client.create_connection("src", "postgres", postgres_config(src))
                dst_cloud = await client.create_connection("dst", "postgres", postgres_config(dst))
                src_edge = await client.create_connection(
                    "src-edge", "postgres", postgres_config(src), "agent", str(agent.value.id)
                )
                flows = {
                    "cloud -> cloud": (src_cloud, "c2c"),
                    "agent -> cloud": (src_edge, "a2c"),
                }
                samples: dict[str, Any] = {}
                for name, (source, table) in flows.items():
                    pipeline = await client.create_pipeline(
                        table,
                        source.id,
                        dst_cloud.id,
                        streams=["small"],
                        spec={"destination": {"small": table}},
                        write_mode="overwrite",
                    )
                    async with DataFloor(src, dst, table) as floor:
                        await flow(client, name, pipeline.id, args.runs, samples, floor)
        print(f"{args.rows}-row runs; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
        for name, (totals, steps, events) in samples.items():
            report(name, totals, steps, events)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rows", type=int, default=10)
    asyncio.run(main(parser.parse_args()))
