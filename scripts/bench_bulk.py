"""Bulk transitions next to the one statement that makes the same change, in
one run on one database (the machine may be shared: compare the ratio).

    python scripts/bench_bulk.py [--jobs 10000] [--rounds 3]

A real setu-server process on an embedded PostgreSQL (or SETU_DATABASE_URL).
Each round makes two agents of one workspace, each with --jobs jobs, every
job with one task queued for that agent (a tenth of them leased, as an agent
at work holds some), then, alternating which goes first:

- setu: `AdminService.DeactivateAgent` over gRPC for the first agent (its
  tasks fail, their jobs fail naming the agent: events, versions, NOTIFYs);
- the statement: one SQL statement that fails the second agent's tasks and
  ends their jobs through the same transition function (`setu_transition_jobs`:
  each job its own event, version bump and notification), run here.

Prints each round's seconds, the medians and their ratio (target: setu
<= 2 x the statement), and the issue-27 TABLE line.
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
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from setu_client._proto.setu.v1 import admin_pb2, admin_pb2_grpc  # noqa: E402
from setu_client.channel import open_channel  # noqa: E402
from setu_client.clock import SystemClock  # noqa: E402
from setu_server.service.admin import AdminService  # noqa: E402
from setu_server.service.secrets import TokenKind, new_secret  # noqa: E402
from setu_server.store import db  # noqa: E402
from setu_server.store.migrate import migrate  # noqa: E402

TARGET = 2.0
TIMES = "\u00d7"  # the table's multiplication sign
LEASED_SHARE = 10  # one job in this many has its task leased

# The floor: the agent's tasks failed and their jobs ended, in one statement,
# through the transition function every job transition goes through.
STATEMENT = """
WITH failed AS (
    UPDATE task
    SET state = 'failed', error_message = $2, lease_expires_at = NULL,
        finished_at = now(), updated_at = now()
    WHERE runtime = $1 AND state IN ('pending', 'leased')
    RETURNING job_id
)
SELECT count(*) FROM setu_transition_jobs(
    (SELECT array_agg(DISTINCT job_id) FROM failed), 'failed',
    ARRAY['ready', 'pending', 'running'], $2, NULL, 'error', $2, NULL, NULL)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


async def _agent_with_jobs(
    pool: asyncpg.Pool, admin: AdminService, workspace: uuid.UUID, n: int
) -> uuid.UUID:
    """An agent with `n` running jobs, each with one task queued or leased for it."""
    agent = (await admin.create_agent(workspace, f"bench-{uuid.uuid4().hex[:8]}")).value
    jobs = [uuid.uuid4() for _ in range(n)]
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO job (id, workspace_id, kind, state, created_at, updated_at, started_at) "
            "SELECT j, $2, 'test', 'running', now(), now(), now() FROM unnest($1::uuid[]) AS j",
            jobs,
            workspace,
        )
        await conn.execute(
            "INSERT INTO task (id, job_id, workspace_id, kind, state, runtime, agent_id, "
            "max_attempts, run_after, lease_token, lease_expires_at, created_at, updated_at) "
            "SELECT gen_random_uuid(), j, $2, 'test', "
            "  CASE WHEN i % $4 = 0 THEN 'leased' ELSE 'pending' END, $3, $5, 1, now(), "
            "  CASE WHEN i % $4 = 0 THEN gen_random_uuid() END, "
            "  CASE WHEN i % $4 = 0 THEN now() + interval '1 hour' END, now(), now() "
            "FROM unnest($1::uuid[]) WITH ORDINALITY AS u(j, i)",
            jobs,
            workspace,
            str(agent.id),
            LEASED_SHARE,
            agent.id,
        )
        await conn.execute("ANALYZE job; ANALYZE task")
    return agent.id


async def _deactivate(port: int, token: str, agent_id: uuid.UUID) -> float:
    async with open_channel(f"127.0.0.1:{port}", token) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        started = time.perf_counter()
        await stub.DeactivateAgent(
            admin_pb2.DeactivateAgentRequest(agent_id=str(agent_id)), timeout=600
        )
        return time.perf_counter() - started


async def _statement(pool: asyncpg.Pool, agent_id: uuid.UUID) -> tuple[float, int]:
    async with pool.acquire() as conn:
        started = time.perf_counter()
        ended = await conn.fetchval(STATEMENT, str(agent_id), "agent deactivated (floor)")
        return time.perf_counter() - started, int(ended)


async def _wait_up(port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=60, wait_for_ready=True
        )
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def main(n: int, rounds: int) -> None:
    url, embedded = await _database()
    conn = await db.connect(url)
    await migrate(conn)
    await conn.close()
    pool = await db.create_pool(url, max_size=4)
    admin = AdminService(pool, SystemClock())
    workspace = (await admin.create_workspace(f"bench-{uuid.uuid4().hex[:6]}")).id
    port = _free_port()
    token = new_secret(TokenKind.ADMIN).token
    env = os.environ | {
        "SETU_DATABASE_URL": url,
        "SETU_LISTEN": f"127.0.0.1:{port}",
        "SETU_ADMIN_TOKEN": token,
        "SETU_LOG_LEVEL": "warning",
        "SETU_HTTP_LISTEN": "",  # no run monitor: port 8080 may be taken
    }
    server = subprocess.Popen(  # noqa: ASYNC220 - started once, before measuring
        [sys.executable, "-m", "setu_server.main"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL
    )
    setu: list[float] = []
    floor: list[float] = []
    try:
        await _wait_up(port)
        print(f"setu-server pid {server.pid}; PostgreSQL {'embedded' if embedded else url}")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared machine)")
        print(f"{n:,} jobs per side, one task each ({100 // LEASED_SHARE} % leased)")
        for round_ in range(rounds):
            first = await _agent_with_jobs(pool, admin, workspace, n)
            second = await _agent_with_jobs(pool, admin, workspace, n)
            if round_ % 2 == 0:
                setu.append(await _deactivate(port, token, first))
                seconds, ended = await _statement(pool, second)
            else:
                seconds, ended = await _statement(pool, second)
                setu.append(await _deactivate(port, token, first))
            floor.append(seconds)
            failed = await pool.fetchval(
                "SELECT count(*) FROM task t JOIN job j ON j.id = t.job_id "
                "WHERE t.agent_id = $1 AND j.state = 'failed'",
                first,
            )
            assert failed == n and ended == n, (failed, ended)
            print(
                f"  round {round_ + 1}: DeactivateAgent {setu[-1]:6.2f} s   "
                f"one statement {floor[-1]:6.2f} s   {setu[-1] / floor[-1]:5.2f} x"
            )
            # Quiet between rounds: the server's listener hears 2n notices.
            await asyncio.sleep(1.0)
    finally:
        server.terminate()
        server.wait(30)
        await pool.close()
        if embedded is not None:
            embedded.cleanup()
    s, f = statistics.median(setu), statistics.median(floor)
    ratio = s / f
    print(f"median: DeactivateAgent {s:.2f} s, the statement {f:.2f} s: {ratio:.2f} x")
    met = "met" if ratio <= TARGET else "missed"
    print(
        f"TABLE | AdminService.DeactivateAgent ending {n:,} jobs | one SQL statement {f:.2f} s "
        f"| {s:.2f} s | {ratio:.2f} {TIMES} | ≤ {TARGET:g} {TIMES} | {met}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.jobs, args.rounds))
