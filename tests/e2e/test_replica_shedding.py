"""A replica that starts to shut down sheds its waiters at once: its answers
say it is closing (the setu-server-closing trailer, ServerClosing), and an
SDK client whose target names another replica moves its long-polls there
before it asks again, so the closing replica answers each waiter about once
more, not once per backoff until it is gone (setu_client/replicas.py).

A's drain is held at its pause point (server-draining, where its cloud
workers would be handing their tasks back) until every waiter is parked on
B: a client that only backed off would knock on A for as long as A drains."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp
import asyncpg
from prometheus_client.parser import text_string_to_metric_families

from setu_client import SetuClient
from setu_engine.support import testpoints
from setu_server.models import JobState
from setu_server.store import jobs
from tests.factories import make_job, make_tenant
from tests.pause import pause_point
from tests.servers import free_port, server_process, wait_healthy

WAITERS = 1000
WAIT_JOB = "/setu.v1.JobOrchestrationService/WaitJob"


async def parked_waits(metrics_url: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(metrics_url) as response:
        text = await response.text()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "setu_grpc_server_parked_calls"
        and sample.labels.get("grpc_method") == "WaitJob"
    )


async def until_parked(metrics_url: str, count: int, within: float = 120) -> None:
    """Scrapes a replica's /metrics until `count` WaitJob calls are parked."""
    async with asyncio.timeout(within):
        while await parked_waits(metrics_url) < count:  # noqa: ASYNC110  # another process
            await asyncio.sleep(0.1)


def wait_calls_after_closing(log: Path) -> int:
    """WaitJob calls the server answered (any code) once it began to shut down."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    closing = next(i for i, line in enumerate(lines) if line.get("msg") == "shutting down")
    return sum(line.get("method") == WAIT_JOB for line in lines[closing:])


async def test_a_closing_replica_sheds_a_thousand_waiters_to_the_other(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant = await make_tenant(pool)
    waited = [
        await make_job(pool, tenant.workspace_id, state=JobState.RUNNING) for _ in range(WAITERS)
    ]
    env = {"SETU_DATABASE_URL": database_url, "SETU_WORKER_PROCESSES": "0"}
    a_metrics, b_metrics = free_port(), free_port()
    async with pause_point(tmp_path / "pause", testpoints.SERVER_DRAINING) as draining:
        await draining.arm()
        a_env = env | {
            "SETU_HTTP_LISTEN": f"127.0.0.1:{a_metrics}",
            "SETU_TEST_PAUSE": draining.setting,
        }
        b_env = env | {"SETU_HTTP_LISTEN": f"127.0.0.1:{b_metrics}"}
        with (
            server_process(a_env, tmp_path / "a.log") as (a, a_port),
            server_process(b_env, tmp_path / "b.log") as (_, b_port),
        ):
            await asyncio.gather(wait_healthy(a_port), wait_healthy(b_port))
            # pick_first: every long-poll goes to A, the first address, while it is up.
            target = f"ipv4:127.0.0.1:{a_port},127.0.0.1:{b_port}"
            async with SetuClient(target, tenant.api_key) as client:
                waits = [asyncio.create_task(client.wait_for_job(str(j.id))) for j in waited]
                await until_parked(f"http://127.0.0.1:{a_metrics}/metrics", WAITERS)

                a.send_signal(signal.SIGTERM)
                await draining.reached()
                # A drains (and still serves); the waiters are on B meanwhile.
                try:
                    await until_parked(f"http://127.0.0.1:{b_metrics}/metrics", WAITERS, 60)
                except TimeoutError:
                    raise AssertionError("the waiters did not move to B while A drained") from None
                draining.resume()
                assert await asyncio.to_thread(a.wait, 60) == 0
                # A is gone: whatever answers the waits from here is B.
                await jobs.transition_jobs(
                    pool, [j.id for j in waited], JobState.SUCCEEDED, now=None, message="done"
                )
                outcomes = await asyncio.wait_for(asyncio.gather(*waits), 120)

    assert len(outcomes) == WAITERS
    assert {o.state.name for o in outcomes} == {"SUCCEEDED"}, "every wait answered by B"
    answered = wait_calls_after_closing(tmp_path / "a.log")
    print(f"\nA answered {answered} WaitJob calls for {WAITERS} waiters once it began to close")
    assert answered <= WAITERS * 1.1, f"{answered} WaitJob calls reached the closing replica"
