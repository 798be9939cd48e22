"""The cloud runtime is a process of its own: it holds none of the control
plane's credentials, and a worker killed mid-run is replaced without losing
or repeating anything (setu_server/worker/supervisor.py, setu_agent/cloud/)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from setu_client._proto.setu.v1 import (
    agents_pb2,
    agents_pb2_grpc,
    cloud_pb2,
    cloud_pb2_grpc,
    common_pb2,
)
from setu_client.channel import open_channel
from tests.e2e.test_cloud_run_lifecycle import (
    LOAD_ROWS,
    fetch,
    fill,
    pipeline,
    row_in_flight,
)
from tests.factories import Tenant, make_task
from tests.servers import ADMIN_TOKEN, in_process

S = common_pb2
Code = grpc.StatusCode


def _read(path: str) -> str:
    return Path(path).read_text()


async def test_a_cloud_worker_holds_no_credentials_of_the_control_plane(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ambient = {
        "SETU_DATABASE_URL": database_url,
        "SETU_ADMIN_TOKEN": ADMIN_TOKEN,
        "PGPASSWORD": "pg-password-of-the-server",
        "PGHOST": "db.internal",
        "PGPASSFILE": str(tmp_path / "pgpass"),
        "AWS_PROFILE": "control-plane",
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
        "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "gcp.json"),
    }
    for name, value in ambient.items():
        monkeypatch.setenv(name, value)
    async with in_process(database_url, data_dir=tmp_path / "server") as server:
        assert server.services.workers is not None
        worker = await server.services.workers.process()
        environ = dict(
            item.split("=", 1)
            for item in _read(f"/proc/{worker.pid}/environ").split("\0")
            if "=" in item
        )
        command = _read(f"/proc/{worker.pid}/cmdline")

    leaked = sorted(n for n in environ if n.startswith(("PG", "AWS_", "GOOGLE_", "AZURE_")))
    assert leaked == []
    assert "SETU_DATABASE_URL" not in environ and "SETU_ADMIN_TOKEN" not in environ
    for value in (database_url, ADMIN_TOKEN, "pg-password-of-the-server"):
        assert value not in "\n".join(environ.values()) and value not in command
    # What it does hold: where to find the server, and its own token.
    assert environ["SETU_SERVER"] == f"127.0.0.1:{server.port}"
    assert len(environ["SETU_WORKER_TOKEN"]) >= 16


async def test_a_worker_killed_mid_load_is_replaced_and_the_run_loads_once(
    client_for: Any, databases: tuple[str, str], database_url: str
) -> None:
    source, destination = databases
    await fill(source, "events", LOAD_ROWS)
    await fill(destination, "events", 3, first=LOAD_ROWS + 1)  # the pre-run content
    server, client = await client_for(
        batch_rows=100,
        direct_max_rows=0,
        lease_ttl_seconds=3,
        reaper_interval_seconds=0.2,
        task_retry_backoff_seconds=0.05,
    )
    workers = server.services.workers
    assert workers is not None

    # A row held by another transaction stops the load halfway through.
    async with row_in_flight(destination, "events", LOAD_ROWS // 2):
        job = await client.submit_run(await pipeline(client, source, destination))
        async for snapshot in client.watch_job(job.id):
            if snapshot.phase == S.PHASE_LOAD and snapshot.progress.rows_loaded > 0:
                break
        victim = await workers.process()
        victim.kill()
        await victim.wait()
    replacement = await workers.process(other_than=victim)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    timeline = [e.message async for e in client.job_events(job.id)]

    assert done.state == S.JOB_STATE_SUCCEEDED, (done.error_message, timeline)
    assert replacement.returncode is None and workers.started == 2
    assert any("Lease of task migrate expired" in line for line in timeline), timeline
    assert any("Resuming at load" in line for line in timeline), timeline
    counted = await fetch(destination, "SELECT count(*), count(DISTINCT id) FROM events")
    assert counted == [(LOAD_ROWS + 3, LOAD_ROWS + 3)]
    attempts = await fetch(database_url, f"SELECT attempt FROM task WHERE job_id = '{job.id}'")
    assert attempts == [(2,)]


async def test_a_runs_books_open_only_to_the_cloud_lease_of_its_migrate_task(
    client_for: Any, databases: tuple[str, str], tenant: Tenant, pool: asyncpg.Pool
) -> None:
    source, destination = databases
    await fill(source, "events", 10)
    server, client = await client_for(worker_processes=0)  # this test is the worker
    job = await client.submit_run(await pipeline(client, source, destination))
    address = f"127.0.0.1:{server.port}"
    async with open_channel(address, server.services.worker_token) as worker:
        leased = (
            await agents_pb2_grpc.AgentServiceStub(worker).LeaseTask(
                agents_pb2.LeaseTaskRequest(wait_seconds=5)
            )
        ).task
        assert leased.job_id == job.id and leased.kind == agents_pb2.TASK_KIND_MIGRATE
        books = cloud_pb2_grpc.CloudRunServiceStub(worker)

        def ask(task_id: str, token: str) -> Any:
            lease = cloud_pb2.TaskLease(task_id=task_id, lease_token=token)
            return books.GetMigrateSpec(cloud_pb2.GetMigrateSpecRequest(lease=lease))

        spec = await ask(leased.id, leased.lease_token)
        assert spec.job_id == job.id and spec.workspace_id == str(tenant.workspace_id)
        assert spec.source.config["host"] and not spec.ended and not spec.cancel_requested
        assert await _code(ask(leased.id, str(uuid.uuid4()))) == Code.FAILED_PRECONDITION
        agent_task = await make_task(pool, tenant)  # a task of the tenant's agent
        assert await _code(ask(str(agent_task.id), leased.lease_token)) == Code.NOT_FOUND
    for credential in (tenant.agent_token, tenant.api_key):
        async with open_channel(address, credential) as channel:
            books = cloud_pb2_grpc.CloudRunServiceStub(channel)
            lease = cloud_pb2.TaskLease(task_id=leased.id, lease_token=leased.lease_token)
            call = books.GetMigrateSpec(cloud_pb2.GetMigrateSpecRequest(lease=lease))
            assert await _code(call) == Code.PERMISSION_DENIED


async def _code(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value.code()
