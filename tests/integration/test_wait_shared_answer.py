"""Every WaitJob parked on one job is answered, when it ends, with one
answer built once (issue 27, "Storms"): one named snapshot and one
WaitJobResponse for the version, however many calls wait on it."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from setu_client._proto.setu.v1 import common_pb2, jobs_pb2, jobs_pb2_grpc
from setu_client.channel import open_channel
from setu_server.models import JobState
from setu_server.store import jobs
from tests.factories import make_job, make_tenant
from tests.servers import in_process

WAITERS = 20


async def test_the_waiters_of_one_version_get_one_answer_built_once(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    async with in_process(database_url, wait_cap_seconds=3600.0) as server:
        read: list[uuid.UUID] = []
        all_read = asyncio.Event()

        async def mark(job_id: uuid.UUID) -> None:
            read.append(job_id)
            if len(read) == WAITERS:
                all_read.set()

        server.jobs.hooks.after_read = mark
        async with open_channel(f"127.0.0.1:{server.port}", tenant.api_key) as channel:
            stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
            calls = [
                stub.WaitJob(jobs_pb2.WaitJobRequest(job_id=str(job.id)), timeout=60)
                for _ in range(WAITERS)
            ]
            await all_read.wait()
            named, built = server.hub.named, server.jobs.answers.built
            # Ended as another server would: this one learns it by notification.
            await jobs.transition_job(pool, job.id, JobState.SUCCEEDED, now=None, message="done")
            answers = await asyncio.gather(*calls)
    assert {(a.state, a.terminal, a.version) for a in answers} == {
        (common_pb2.JOB_STATE_SUCCEEDED, True, job.version + 1)
    }
    assert (server.hub.named - named, server.jobs.answers.built - built) == (1, 1)
