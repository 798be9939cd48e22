"""A migrate keeps its run's books in few calls (setu_agent/cloud/book.py,
setu_server/service/runbook.py): the plan with the phase and its timeline
line, a stream's counts with its line, and the last stream's record writing
the run's counts and answering its outputs."""

from __future__ import annotations

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
from tests.e2e.test_cloud_run_lifecycle import fill, pipeline
from tests.factories import Tenant


async def _run_row(pool: asyncpg.Pool, job_id: str) -> Any:
    return await pool.fetchrow(
        "SELECT phase, rows_total, extract_runtime, load_runtime, rows_extracted, rows_loaded "
        "FROM job WHERE id = $1",
        job_id,
    )


async def _events(pool: asyncpg.Pool, job_id: str) -> list[tuple[str, str]]:
    rows = await pool.fetch(
        "SELECT message, stream FROM job_event WHERE job_id = $1 ORDER BY sequence", job_id
    )
    return [(r["message"], r["stream"]) for r in rows]


async def test_a_migrates_books_take_one_call_per_step(
    client_for: Any, databases: tuple[str, str], tenant: Tenant, pool: asyncpg.Pool
) -> None:
    source, destination = databases
    await fill(source, "events", 10)
    server, client = await client_for(worker_processes=0)  # this test is the worker
    job = await client.submit_run(await pipeline(client, source, destination))
    async with open_channel(f"127.0.0.1:{server.port}", server.services.worker_token) as worker:
        leased = (
            await agents_pb2_grpc.AgentServiceStub(worker).LeaseTask(
                agents_pb2.LeaseTaskRequest(wait_seconds=5)
            )
        ).task
        books = cloud_pb2_grpc.CloudRunServiceStub(worker)
        lease = cloud_pb2.TaskLease(task_id=leased.id, lease_token=leased.lease_token)

        await books.RecordRunPlan(
            cloud_pb2.RecordRunPlanRequest(
                lease=lease,
                rows_total=10,
                extract_in_cloud=True,
                load_in_cloud=True,
                phase=common_pb2.PHASE_DIRECT,
                message="Copying directly in the cloud (about 10 rows, no staging)",
            )
        )
        row = await _run_row(pool, job.id)
        assert (row["phase"], row["rows_total"]) == ("direct", 10)
        assert (row["extract_runtime"], row["load_runtime"]) == ("cloud", "cloud")
        assert (
            "Copying directly in the cloud (about 10 rows, no staging)",
            "",
        ) in await _events(pool, job.id)

        # A line without a phase: the phase stays.
        await books.RecordRunPlan(
            cloud_pb2.RecordRunPlanRequest(lease=lease, message="Loading staged data in the cloud")
        )
        assert (await _run_row(pool, job.id))["phase"] == "direct"
        assert ("Loading staged data in the cloud", "") in await _events(pool, job.id)

        first = await books.RecordStreamLoaded(
            cloud_pb2.RecordStreamLoadedRequest(
                lease=lease,
                stream="public.a",
                rows_extracted=4,
                rows_loaded=4,
                message="Loaded 4 of 4 rows",
            )
        )
        assert list(first.outputs) == []  # not the last stream: nothing asked
        assert (await _run_row(pool, job.id))["rows_loaded"] == 0
        last = await books.RecordStreamLoaded(
            cloud_pb2.RecordStreamLoadedRequest(
                lease=lease,
                stream="public.b",
                rows_extracted=6,
                rows_loaded=5,
                message="Loaded 5 of 6 rows",
                record_progress=True,
            )
        )
        assert sorted(
            (o.stream, o.rows_extracted, o.rows_loaded, o.loaded) for o in last.outputs
        ) == [
            ("public.a", 4, 4, True),
            ("public.b", 6, 5, True),
        ]
        row = await _run_row(pool, job.id)
        assert (row["rows_extracted"], row["rows_loaded"]) == (10, 9)
        events = await _events(pool, job.id)
        assert ("Loaded 4 of 4 rows", "public.a") in events
        assert ("Loaded 5 of 6 rows", "public.b") in events

        with pytest.raises(grpc.aio.AioRpcError) as info:
            await books.RecordRunPlan(cloud_pb2.RecordRunPlanRequest(lease=lease, phase=9))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "phase" in (info.value.details() or "")
