"""Loads apply exactly once (docs/flows.md, "Loads that apply once"), with
real worker and agent processes, under `append` into a table with no key, so
a load applied twice shows as every row twice:

- a cloud load whose bookkeeping never lands (the server refuses the
  record, the worker dies right after its destination commit, or the
  server dies with the record in flight) is not applied again by the retry;
- an edge load whose agent dies after its commit and before CompleteTask
  lands is not applied again by the next agent process;
- an agent cut off from the server (a proxy that stops forwarding without
  closing) stops its own task once it cannot confirm its lease, and the
  retry on another process loads once.

Each window is opened by a hook in the in-process server (the call that
would have recorded the load) or a held lock, never by a sleep."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_client.errors import Unavailable
from setu_server.service.cloud_runs import CloudRuns
from setu_server.service.tasks import TaskService
from setu_tasks.results import LoadResult, TaskResult
from tests.databases import postgres_config, scratch_database
from tests.e2e.test_cloud_run_lifecycle import fetch, row_in_flight
from tests.factories import Tenant, make_tenant
from tests.servers import checked_in_agent, server_process, wait_healthy

S = common_pb2
pytestmark = pytest.mark.slow

ROWS = 3_000
# Short leases, a quick reaper, quick retries: a lost attempt is retried soon.
FAST = {
    "batch_rows": 100,
    "direct_max_rows": 0,
    "lease_ttl_seconds": 3,
    "reaper_interval_seconds": 0.2,
    "task_retry_backoff_seconds": 0.05,
}
REAL_ENGINE = {"SETU_AGENT_EXTRA_HANDLERS": "", "SETU_AGENT_BATCH_ROWS": "100"}


async def source_without_key(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE events AS SELECT i AS id, md5(i::text) AS body "
            "FROM generate_series(1, $1) i",
            ROWS,
        )
    finally:
        await conn.close()


async def each_row_once(destination: str) -> None:
    counted = await fetch(destination, "SELECT count(*), count(DISTINCT id) FROM events")
    assert counted == [(ROWS, ROWS)]


async def events(client: SetuClient, job_id: str) -> list[str]:
    return [e.message async for e in client.job_events(job_id)]


@pytest.mark.parametrize(
    ("how", "direct"), [("refused", False), ("worker killed", False), ("refused", True)]
)
async def test_a_cloud_load_whose_record_is_lost_is_not_applied_again(
    client_for: Any,
    databases: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
    direct: bool,
) -> None:
    source, destination = databases
    await source_without_key(source)
    # Direct: the first attempt copies in one pass; its retry stages, then loads.
    server, client = await client_for(**FAST | {"direct_max_rows": ROWS if direct else 0})
    workers = server.services.workers
    assert workers is not None
    recorded = CloudRuns.stream_loaded
    lost = asyncio.Event()

    async def lose_the_first_record(self: CloudRuns, *args: Any, **kwargs: Any) -> Any:
        # The worker has committed the stream into the destination when it
        # asks to record it: this record never lands.
        if not lost.is_set():
            lost.set()
            if how == "worker killed":
                victim = await workers.process()
                victim.kill()
                await victim.wait()
            raise Unavailable("the database connection dropped")
        return await recorded(self, *args, **kwargs)

    monkeypatch.setattr(CloudRuns, "stream_loaded", lose_the_first_record)
    src = await client.create_connection("source", "postgres", postgres_config(source))
    dst = await client.create_connection("destination", "postgres", postgres_config(destination))
    pipeline = await client.create_pipeline("copy", src.id, dst.id, streams=["events"])
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    timeline = await events(client, job.id)

    assert lost.is_set()
    assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
    if direct:  # the first attempt copied directly; the retry staged and loaded
        assert any("Copying directly" in m for m in timeline), timeline
        assert done.phase == S.PHASE_LOAD
    else:
        assert any("Resuming at load" in m for m in timeline), timeline
    await each_row_once(destination)
    outputs = await client.job_outputs(job.id)
    assert [(o.rows_extracted, o.rows_loaded) for o in outputs.streams] == [(ROWS, ROWS)]
    if how == "worker killed":
        assert workers.started == 2


async def edge_pipeline(client: SetuClient, tenant: Tenant, source: str, destination: str) -> str:
    """cloud → agent: the load runs on the tenant's agent."""
    src = await client.create_connection("source", "postgres", postgres_config(source))
    dst = await client.create_connection(
        "destination", "postgres", postgres_config(destination), "agent", str(tenant.agent_id)
    )
    created = await client.create_pipeline("copy", src.id, dst.id, streams=["events"])
    return str(created.id)


async def test_an_edge_load_whose_completion_is_lost_is_not_applied_again(
    client_for: Any,
    databases: tuple[str, str],
    tenant: Tenant,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    source, destination = databases
    await source_without_key(source)
    server, client = await client_for(**FAST)
    completed = TaskService.complete
    agents: list[asyncio.subprocess.Process] = []
    lost = asyncio.Event()

    async def kill_before_the_first_load_completes(
        self: TaskService,
        runtime: str,
        task_id: Any,
        token: Any,
        result: TaskResult | None,
        *,
        lease_next: bool = False,
    ) -> Any:
        # The agent has committed its load when it reports it: it dies
        # before the completion lands.
        if isinstance(result, LoadResult) and not lost.is_set():
            lost.set()
            agents[0].kill()
            await agents[0].wait()
            raise Unavailable("the agent is gone")
        return await completed(self, runtime, task_id, token, result, lease_next=lease_next)

    monkeypatch.setattr(TaskService, "complete", kill_before_the_first_load_completes)
    pipeline = await edge_pipeline(client, tenant, source, destination)
    async with checked_in_agent(
        server.port, tenant.agent_token, tmp_path / "agent-a.log", **REAL_ENGINE
    ) as first:
        agents.append(first)
        job = await client.submit_run(pipeline)
        await lost.wait()
    async with checked_in_agent(
        server.port, tenant.agent_token, tmp_path / "agent-a-again.log", **REAL_ENGINE
    ):
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        timeline = await events(client, job.id)

    assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
    assert any("stopped heartbeating; requeued" in m for m in timeline), timeline
    assert sum(m.startswith("Load finished") for m in timeline) == 1, timeline
    await each_row_once(destination)
    assert done.progress.rows_loaded == ROWS


class Proxy:
    """A TCP forwarder to a port that can stop forwarding without closing:
    to the runtime behind it, the server goes silent (a partition), and
    nothing tells it so."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.port = 0
        self._pipes: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for pipe in self._pipes:
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    def partition(self) -> None:
        self.flowing.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        for pipe in (self._pipe(reader, up_writer), self._pipe(up_reader, writer)):
            task = asyncio.create_task(pipe)
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.flowing.wait()  # partitioned: held, never delivered
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


async def test_a_partitioned_agent_stops_its_task_and_the_retry_loads_once(
    client_for: Any, databases: tuple[str, str], tenant: Tenant, tmp_path: Path
) -> None:
    source, destination = databases
    await source_without_key(source)
    conn = await asyncpg.connect(destination)
    try:  # a key, so a row held by another transaction stops the load midway
        await conn.execute("CREATE TABLE events (id integer PRIMARY KEY, body text)")
    finally:
        await conn.close()
    # A longer lease than FAST's: on a loaded machine the retrying agent's
    # heartbeats must not miss a 3 s lease twice (the retry would give up).
    server, client = await client_for(**(FAST | {"lease_ttl_seconds": 6}))
    pipeline = await edge_pipeline(client, tenant, source, destination)
    stopped = asyncio.Event()

    def hear(line: bytes) -> None:
        if b"lease unconfirmed; task stopped" in line:
            stopped.set()

    async with (
        Proxy(server.port) as proxy,
        checked_in_agent(
            proxy.port, tenant.agent_token, tmp_path / "agent-a.log", hear, **REAL_ENGINE
        ),
    ):
        async with row_in_flight(destination, "events", ROWS // 2):
            job = await client.submit_run(pipeline)
            # The agent's heartbeats carry its load's progress: it is inside
            # its destination transaction, held at the row.
            async for snapshot in client.watch_job(job.id):
                if snapshot.progress.rows_loaded > 0:
                    break
            proxy.partition()
            # Without a heartbeat answered, the agent stops its task by itself
            # (bounded here only so that a failure does not hang the suite).
            await asyncio.wait_for(stopped.wait(), 60)
        async with checked_in_agent(
            server.port, tenant.agent_token, tmp_path / "agent-b.log", **REAL_ENGINE
        ):
            await client.wait_for_job(job.id)
            done = await client.get_job(job.id)
            timeline = await events(client, job.id)

    assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
    assert any("stopped heartbeating; requeued" in m for m in timeline), timeline
    await each_row_once(destination)


async def test_a_server_killed_between_the_load_commit_and_its_record_does_not_load_again(
    database_url: str, pool: asyncpg.Pool, pg_server_url: str, tmp_path: Path
) -> None:
    """The server dies with the worker's record of a committed stream in
    flight: held behind a lock on Setu's own table, so it surely never lands."""
    tenant = await make_tenant(pool)
    env = {
        "SETU_DATABASE_URL": database_url,
        "SETU_DATA_DIR": str(tmp_path / "server"),  # the blob folder both servers share
        "SETU_DIRECT_MAX_ROWS": "0",
        "SETU_BATCH_ROWS": "500",
        "SETU_LEASE_TTL_SECONDS": "2",  # the dead server's lease runs out soon
        "SETU_REAPER_INTERVAL_SECONDS": "0.2",
        "SETU_TASK_RETRY_BACKOFF_SECONDS": "0.05",
        "SETU_LOG_FORMAT": "text",
    }
    async with (
        scratch_database(pg_server_url) as source,
        scratch_database(pg_server_url) as destination,
    ):
        await source_without_key(source)
        dest = await asyncpg.connect(destination)
        await dest.execute(
            "CREATE TABLE events (id integer, body text);"
            "CREATE FUNCTION loaded() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_notify('loaded', ''); RETURN NULL; END $$;"
            "CREATE TRIGGER loaded AFTER INSERT ON events "
            "FOR EACH STATEMENT EXECUTE FUNCTION loaded()"
        )
        committed = asyncio.Event()
        # A notification is delivered when the transaction that sent it commits.
        await dest.add_listener("loaded", lambda *_: committed.set())
        blocker = await asyncpg.connect(destination)  # holds the load before its commit
        await blocker.execute("BEGIN; LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
        books = await asyncpg.connect(database_url)  # holds the record after it

        with server_process(env, tmp_path / "first.log") as (first, port):
            await wait_healthy(port)
            async with SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client:
                src = await client.create_connection("src", "postgres", postgres_config(source))
                dst = await client.create_connection(
                    "dst", "postgres", postgres_config(destination)
                )
                pipeline = await client.create_pipeline("events", src.id, dst.id)
                job = await client.submit_run(pipeline.id)
                async for snapshot in client.watch_job(job.id):
                    if snapshot.phase == S.PHASE_LOAD:
                        break
            await books.execute("BEGIN; LOCK TABLE job_output IN SHARE MODE")
            await blocker.execute("ROLLBACK")
            await committed.wait()
            first.kill()
            first.wait()
        # What the dead server had sent waits on the lock: it never lands.
        await books.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        await books.execute("ROLLBACK")
        for conn in (books, blocker, dest):
            await conn.close()

        with server_process(env, tmp_path / "second.log") as (_, port):
            await wait_healthy(port)
            async with SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client:
                await asyncio.wait_for(client.wait_for_job(job.id), 60)
                done = await client.get_job(job.id)
                timeline = await events(client, job.id)

        assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
        assert any("Resuming at load" in m for m in timeline), timeline
        await each_row_once(destination)
