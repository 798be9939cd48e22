"""/metrics over HTTP: it parses, `promtool check metrics` accepts it where
Debian's `prometheus` package is installed, and its figures move as jobs and
tasks go through their states. Every figure is read before and after, so
what other servers of the test process did never matters."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import aiohttp
import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from setu_client import JobState, SetuClient
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc
from setu_client.channel import open_channel
from setu_client.clock import FakeClock
from setu_server.server import Running
from tests.factories import Tenant, make_job, make_task
from tests.servers import in_process

Labels = frozenset[tuple[str, str]]

AGENTS = "setu.v1.AgentService"
JOBS = "setu.v1.JobOrchestrationService"
PIPELINES = "setu.v1.PipelineService"


class Figures:
    """One scrape: every sample by name and labels."""

    def __init__(self, text: str) -> None:
        self.families = list(text_string_to_metric_families(text))
        self.samples: dict[tuple[str, Labels], float] = {
            (s.name, frozenset(s.labels.items())): s.value
            for family in self.families
            for s in family.samples
        }

    def __call__(self, metric: str, /, **labels: str) -> float:
        """A sample's value; 0 when absent (a series not seen yet)."""
        return self.samples.get((metric, frozenset(labels.items())), 0.0)

    def names(self) -> set[str]:
        return {family.name for family in self.families}


async def scrape(server: Running) -> tuple[str, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{server.http_url}/metrics") as response,
    ):
        assert response.status == 200
        return response.headers["Content-Type"], await response.text()


async def figures(server: Running) -> Figures:
    return Figures((await scrape(server))[1])


async def settled(server: Running, holds: Callable[[Figures], bool]) -> Figures:
    """Scrapes until `holds`, for a figure that another caller's request
    moves after the test saw its effect (a worker's completion, counted once
    its transaction committed: a WaitJob may read the ended job first)."""
    async with asyncio.timeout(20):
        while True:
            now = await figures(server)
            if holds(now):
                return now
            await asyncio.sleep(0.01)


def waiting(server: Running) -> asyncio.Event:
    """Set once a WaitJob on `server` has subscribed and read its job: parked."""
    parked = asyncio.Event()

    async def mark(job_id: UUID) -> None:
        parked.set()

    server.jobs.hooks.after_read = mark
    return parked


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2030, 1, 1, tzinfo=UTC))


@pytest.fixture
def server_settings() -> dict[str, object]:
    # The reaper and the gauges refresh run when a test says, on its clock.
    return {"reaper_interval_seconds": 3600.0, "metrics_refresh_seconds": 3600.0}


@pytest.fixture
async def agent(server: Running, tenant: Tenant) -> AsyncIterator[agents_pb2_grpc.AgentServiceStub]:
    async with open_channel(f"127.0.0.1:{server.port}", tenant.agent_token) as channel:
        yield agents_pb2_grpc.AgentServiceStub(channel)


async def test_metrics_parse_and_promtool_accepts_them(server: Running, client: SetuClient) -> None:
    [_ async for _ in client.list_pipelines()]
    content_type, text = await scrape(server)
    assert content_type.startswith("text/plain; version=")
    seen = Figures(text)
    assert {
        "setu_grpc_server_handled",
        "setu_grpc_server_handling_seconds",
        "setu_grpc_server_long_poll_seconds",
        "setu_grpc_server_parked_calls",
        "setu_job_transitions",
        "setu_run_duration_seconds",
        "setu_task_pickup_seconds",
        "setu_tasks",
        "setu_agents_online",
        "setu_watch_hub_watches",
        "setu_listen_reconnects",
        "setu_listen_notifications_received",
        "setu_watch_rechecks",
        # The standard collectors.
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "python_info",
        "python_gc_collections",
    } <= seen.names()
    listed = seen("setu_grpc_server_handled_total", **_call(PIPELINES, "ListPipelines", "OK"))
    assert listed == 1
    assert seen("setu_listen_connected") == 1
    assert seen("setu_listen_reconnects_total") == 0, "a fresh server has its first session"
    promtool = shutil.which("promtool")
    if promtool is not None:
        check = await asyncio.create_subprocess_exec(
            promtool,
            "check",
            "metrics",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        said, _ = await asyncio.wait_for(check.communicate(text.encode()), 60)
        assert check.returncode == 0, said.decode()


async def test_a_task_through_its_states_moves_the_counters_and_gauges(
    server: Running,
    agent: agents_pb2_grpc.AgentServiceStub,
    pool: asyncpg.Pool,
    tenant: Tenant,
    clock: FakeClock,
) -> None:
    runtime = str(tenant.agent_id)
    queued = {"runtime": runtime, "kind": "test", "state": "pending"}
    held = queued | {"state": "leased"}
    placed = {"runtime": "agent", "kind": "test"}
    job_kind = {"kind": "test"}
    before = await figures(server)

    # Queued (five seconds ago, by its clock), and counted by the census.
    task = await make_task(pool, tenant, now=clock.now() - timedelta(seconds=5), max_attempts=2)
    await server.services.gauges.run_once()
    queued_now = await figures(server)
    assert queued_now("setu_tasks", **queued) == before("setu_tasks", **queued) + 1

    # A LeaseTask takes it: the pickup histogram has its five seconds.
    leased = (await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5), timeout=20)).task
    assert leased.id == str(task.id)
    await server.services.gauges.run_once()
    first = await figures(server)
    moved = _delta(before, first)
    assert moved("setu_job_transitions_total", **job_kind, state="running") == 1
    assert moved("setu_task_pickup_seconds_count", **placed) == 1
    assert moved("setu_task_pickup_seconds_sum", **placed) == 5
    assert moved("setu_task_pickup_seconds_bucket", **placed, le="2.5") == 0
    assert moved("setu_task_pickup_seconds_bucket", **placed, le="5.0") == 1
    assert moved("setu_tasks", **queued) == 0
    assert moved("setu_tasks", **held) == 1
    lease_call = _call(AGENTS, "LeaseTask", "OK")
    assert moved("setu_grpc_server_handled_total", **lease_call) == 1
    timed = {"grpc_service": AGENTS, "grpc_method": "LeaseTask"}
    assert moved("setu_grpc_server_long_poll_seconds_count", **timed) == 1
    assert moved("setu_grpc_server_handling_seconds_count", **timed) == 0, "long-polls apart"

    # The lease runs out: the reaper requeues it (attempt 2 of 2).
    clock.advance(server.settings.lease_ttl_seconds + 1)
    assert (await server.services.reaper.run_once()).requeued == [task.id]
    await server.services.gauges.run_once()
    second = await figures(server)
    moved = _delta(before, second)
    assert moved("setu_task_lease_expiries_total", **placed) == 1
    assert moved("setu_task_requeues_total", **placed) == 1
    assert moved("setu_task_attempts_exhausted_total", **placed) == 0
    assert (moved("setu_tasks", **queued), moved("setu_tasks", **held)) == (1, 0)

    # Leased again (the job is running already: no second transition), and
    # expired again: attempts spent, the task and its job fail.
    clock.advance(600)
    again = (await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5), timeout=20)).task
    assert again.id == str(task.id) and again.attempt == 2
    clock.advance(server.settings.lease_ttl_seconds + 1)
    assert (await server.services.reaper.run_once()).failed == [task.id]
    await server.services.gauges.run_once()
    last = await figures(server)
    moved = _delta(before, last)
    assert moved("setu_job_transitions_total", **job_kind, state="running") == 1
    assert moved("setu_job_transitions_total", **job_kind, state="failed") == 1
    assert moved("setu_task_lease_expiries_total", **placed) == 2
    assert moved("setu_task_requeues_total", **placed) == 1
    assert moved("setu_task_attempts_exhausted_total", **placed) == 1
    assert moved("setu_task_pickup_seconds_count", **placed) == 2
    assert (moved("setu_tasks", **queued), moved("setu_tasks", **held)) == (0, 0)


async def test_a_retryable_failure_on_the_last_attempt_counts_attempts_exhausted(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    placed = {"runtime": "agent", "kind": "test"}
    before = await figures(server)
    for attempts, retryable in ((1, False), (2, True), (1, True)):
        await make_task(pool, tenant, max_attempts=attempts)
        leased = (await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5), timeout=20)).task
        failure = pb.FailTaskRequest(
            task_id=leased.id,
            lease_token=leased.lease_token,
            error_message="connection reset",
            retryable=retryable,
        )
        await agent.FailTask(failure)
    moved = _delta(before, await figures(server))
    # Only the last: the first was not retryable, the second has attempts left.
    assert moved("setu_task_attempts_exhausted_total", **placed) == 1
    assert moved("setu_job_transitions_total", kind="test", state="failed") == 2
    assert moved("setu_grpc_server_handled_total", **_call(AGENTS, "FailTask", "OK")) == 3


@pytest.mark.server(lease_poll_seconds=3600.0)
async def test_parked_calls_a_notification_and_a_success_are_counted(
    server: Running,
    agent: agents_pb2_grpc.AgentServiceStub,
    client: SetuClient,
    pool: asyncpg.Pool,
    tenant: Tenant,
) -> None:
    wait_parked = {"grpc_service": JOBS, "grpc_method": "WaitJob"}
    lease_parked = {"grpc_service": AGENTS, "grpc_method": "LeaseTask"}
    task_notified = {"channel": "setu_task"}
    before = await figures(server)

    # A client waits on a job, an agent waits for work: both park.
    job = await make_job(pool, tenant.workspace_id)
    parked_wait = waiting(server)
    waiter = asyncio.ensure_future(client.wait_for_job(str(job.id)))
    await asyncio.wait_for(parked_wait.wait(), 20)
    parked_lease = asyncio.Event()

    async def mark(runtime: str) -> None:
        parked_lease.set()

    server.tasks.hooks.parked = mark
    lease = asyncio.ensure_future(agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=30), timeout=45))
    await asyncio.wait_for(parked_lease.wait(), 20)
    parked = _delta(before, await figures(server))
    assert parked("setu_grpc_server_parked_calls", **wait_parked) == 1
    assert parked("setu_grpc_server_parked_calls", **lease_parked) == 1
    assert parked("setu_watch_hub_watches") == 1

    # Its task arrives: with an hour-long fallback poll, only the
    # notification (counted as it is handled) wakes the lessee.
    await make_task(pool, tenant, job=job)
    leased = (await asyncio.wait_for(lease, 20)).task
    assert (
        _delta(before, await figures(server))(
            "setu_listen_notifications_received_total", **task_notified
        )
        >= 1
    )
    done = pb.CompleteTaskRequest(
        task_id=leased.id, lease_token=leased.lease_token, test=pb.TestResult(ok=True)
    )
    await agent.CompleteTask(done)
    outcome = await asyncio.wait_for(waiter, 20)
    assert outcome.state is JobState.SUCCEEDED
    moved = _delta(before, await figures(server))
    assert moved("setu_grpc_server_parked_calls", **wait_parked) == 0
    assert moved("setu_grpc_server_parked_calls", **lease_parked) == 0
    assert moved("setu_watch_hub_watches") == 0
    assert moved("setu_job_transitions_total", kind="test", state="running") == 1
    assert moved("setu_job_transitions_total", kind="test", state="succeeded") == 1
    assert moved("setu_grpc_server_handled_total", **_call(JOBS, "WaitJob", "OK")) == 1
    assert moved("setu_grpc_server_handled_total", **_call(AGENTS, "LeaseTask", "OK")) == 1
    assert moved("setu_grpc_server_handled_total", **_call(AGENTS, "CompleteTask", "OK")) == 1


async def test_agents_online_and_seconds_since_each_was_seen(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, tenant: Tenant, clock: FakeClock
) -> None:
    seen = {"agent": str(tenant.agent_id), "name": "test agent"}
    before = await figures(server)
    await agent.CheckIn(pb.CheckInRequest(version="1.0", hostname="edge-1"))
    clock.advance(30)
    checked_in = await figures(server)
    assert checked_in("setu_agents_online") == before("setu_agents_online") + 1
    assert checked_in("setu_agent_last_seen_age_seconds", **seen) == 30
    stamp = checked_in("setu_agent_last_seen_timestamp_seconds", **seen)
    assert stamp == (clock.now() - timedelta(seconds=30)).timestamp()
    # Past the online window, and read back from the database by the refresh.
    clock.advance(90)
    await server.services.gauges.run_once()
    gone = await figures(server)
    assert gone("setu_agents_online") == before("setu_agents_online")
    assert gone("setu_agent_last_seen_age_seconds", **seen) == 120


async def test_a_lost_listen_connection_and_a_recheck_are_counted(
    server: Running, pool: asyncpg.Pool
) -> None:
    before = await figures(server)
    sessions = server.listener.sessions
    killed = await pool.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = 'setu-listener' AND datname = current_database()"
    )
    assert killed == 1
    await asyncio.wait_for(server.listener.wait_for_session(sessions + 1), 30)
    await server.hub.run_once()
    moved = _delta(before, await figures(server))
    assert moved("setu_listen_reconnects_total") == 1
    assert moved("setu_watch_rechecks_total") == 1


async def test_a_transition_is_counted_by_the_replica_that_committed_it(
    server: Running,
    agent: agents_pb2_grpc.AgentServiceStub,
    database_url: str,
    pool: asyncpg.Pool,
    tenant: Tenant,
    clock: FakeClock,
) -> None:
    task = await make_task(pool, tenant, now=clock.now())
    async with (
        in_process(database_url, clock) as other,
        SetuClient(f"127.0.0.1:{other.port}", tenant.api_key) as watcher,
    ):
        here, there = await figures(server), await figures(other)
        # Somebody waits on the job through the other replica, whose hub
        # hears the transitions made here.
        parked = waiting(other)
        waiter = asyncio.ensure_future(watcher.wait_for_job(str(task.job_id)))
        await asyncio.wait_for(parked.wait(), 20)
        leased = (await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5), timeout=20)).task
        done = pb.CompleteTaskRequest(
            task_id=leased.id, lease_token=leased.lease_token, test=pb.TestResult(ok=True)
        )
        await agent.CompleteTask(done)
        assert (await asyncio.wait_for(waiter, 20)).state is JobState.SUCCEEDED
        counted_here = _delta(here, await figures(server))
        counted_there = _delta(there, await figures(other))
    for state in ("running", "succeeded"):
        assert counted_here("setu_job_transitions_total", kind="test", state=state) == 1
        assert counted_there("setu_job_transitions_total", kind="test", state=state) == 0


async def test_a_run_counts_its_duration_by_flow_and_its_rows_by_pipeline(
    database_url: str, tenant: Tenant, tmp_path: Path
) -> None:
    source, destination = tmp_path / "crm.db", tmp_path / "warehouse.db"
    with sqlite3.connect(source) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        db.executemany("INSERT INTO users VALUES (?, ?)", [(i, f"u{i}") for i in range(1, 43)])
    sqlite3.connect(destination).close()
    async with (
        in_process(database_url) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        src = await client.create_connection("crm", "sqlite", {"path": str(source)})
        dst = await client.create_connection("warehouse", "sqlite", {"path": str(destination)})
        pipeline = await client.create_pipeline("crm-to-warehouse", src.id, dst.id)
        before = await figures(server)
        job = await client.submit_run(pipeline.id)
        outcome = await client.wait_for_job(job.id)
        assert outcome.state is JobState.SUCCEEDED, outcome.error_message
        ended = {"flow": "cloud_to_cloud", "state": "succeeded"}
        after = await settled(
            server,
            lambda f: (
                f("setu_run_duration_seconds_count", **ended)
                > before("setu_run_duration_seconds_count", **ended)
            ),
        )
        moved = _delta(before, after)
    assert moved("setu_run_duration_seconds_count", **ended) == 1
    assert moved("setu_job_transitions_total", kind="run", state="running") == 1
    assert moved("setu_job_transitions_total", kind="run", state="succeeded") == 1
    assert moved("setu_run_rows_extracted_total", pipeline=pipeline.id) == 42
    assert moved("setu_run_rows_loaded_total", pipeline=pipeline.id) == 42


def _call(service: str, method: str, code: str) -> dict[str, str]:
    return {"grpc_service": service, "grpc_method": method, "grpc_code": code}


def _delta(before: Figures, after: Figures) -> Callable[..., float]:
    def moved(metric: str, /, **labels: str) -> float:
        return after(metric, **labels) - before(metric, **labels)

    return moved
