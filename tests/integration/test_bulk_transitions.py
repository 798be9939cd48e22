"""Bulk transitions are set-based, yet each job still moves as if alone: its
own event, its own version bump, its own notification (and so a waiter
parked on another server is woken for each job).

Two real servers share one database: the change is made through `near`,
the waits park on `far`, which hears of each job only by its NOTIFY. A
LISTEN of the test's own counts the notices per job."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import asyncpg
import pytest

from setu_client._proto.setu.v1 import admin_pb2, admin_pb2_grpc, pipelines_pb2, pipelines_pb2_grpc
from setu_client.channel import open_channel
from setu_server.models import Job, JobKind, JobState, TaskKind, TaskState
from setu_server.server import Running
from setu_server.store import jobs, tasks
from tests.factories import Tenant, make_job, make_pipeline, make_task, make_tenant, parked_wait
from tests.servers import ADMIN_TOKEN, in_process

# Far's periodic re-check (the safety net for a lost notice) never runs
# within a test: only a NOTIFY can wake its waits.
RECHECK_SECONDS = 3600.0


@pytest.fixture
async def tenant(pool: asyncpg.Pool) -> Tenant:
    return await make_tenant(pool)


@pytest.fixture
async def near(database_url: str) -> AsyncIterator[Running]:
    async with in_process(database_url, watch_recheck_seconds=RECHECK_SECONDS) as running:
        yield running


@pytest.fixture
async def far(database_url: str) -> AsyncIterator[Running]:
    async with in_process(database_url, watch_recheck_seconds=RECHECK_SECONDS) as running:
        yield running


class Notices:
    """`setu_job` notices heard on a LISTEN session of the test's own."""

    def __init__(self) -> None:
        self.versions: dict[uuid.UUID, list[int]] = {}
        self.heard = asyncio.Event()
        self.expected: set[uuid.UUID] = set()

    def __call__(self, conn: object, pid: int, channel: str, payload: str) -> None:
        notice = json.loads(payload)
        job_id = uuid.UUID(notice["job_id"])
        self.versions.setdefault(job_id, []).append(int(notice["version"]))
        if self.expected <= set(self.versions):
            self.heard.set()


@pytest.fixture
async def notices(database_url: str) -> AsyncIterator[Notices]:
    heard = Notices()
    conn = await asyncpg.connect(database_url)
    await conn.add_listener("setu_job", heard)
    try:
        yield heard
    finally:
        await conn.close()


async def _job(pool: asyncpg.Pool, job_id: uuid.UUID) -> Job:
    job = await jobs.get_job_any(pool, job_id)
    assert job is not None
    return job


async def _task_state(pool: asyncpg.Pool, task_id: uuid.UUID) -> TaskState:
    task = await tasks.get_task(pool, task_id)
    assert task is not None
    return task.state


async def _events(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[str]:
    return [e.message for e in await jobs.list_job_events(pool, job_id, after=0, limit=100)]


async def _moved_each_once(
    pool: asyncpg.Pool,
    tenant: Tenant,
    before: dict[uuid.UUID, Job],
    notices: Notices,
    events_before: dict[uuid.UUID, int],
    to: JobState,
    says: str,
) -> None:
    """Each job of `before` is `to`, one version later, with one new event
    that `says`, and one notice of that version."""
    await asyncio.wait_for(notices.heard.wait(), 30)
    for job_id, was in before.items():
        now = await jobs.get_job(pool, job_id, tenant.workspace_id)
        assert now is not None and now.state is to, (job_id, now)
        events = await _events(pool, job_id)
        new = events[events_before[job_id] :]
        assert len(new) == 1 and says in new[0], (job_id, new)
        # The transition's own bump (a cancelled run's progress adds one more).
        assert now.version >= was.version + 1
        assert was.version + 1 in notices.versions[job_id], (job_id, notices.versions[job_id])
        assert Counter(notices.versions[job_id])[was.version + 1] == 1


async def test_deactivate_agent_ends_each_job_with_its_own_event_version_and_notice(
    near: Running, far: Running, pool: asyncpg.Pool, tenant: Tenant, notices: Notices
) -> None:
    runtime = str(tenant.agent_id)
    held = [await make_task(pool, tenant) for _ in range(2)]
    assert len(await near.tasks.lease_many(runtime, 0, 2)) == 2
    queued = [await make_task(pool, tenant) for _ in range(3)]
    # One job with two tasks on the agent (a load per stream): ended once.
    twice = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    pair = [await make_task(pool, tenant, job=twice, kind=TaskKind.LOAD) for _ in range(2)]
    # One whose sibling stage is queued in the cloud: that one never starts.
    sibling = await make_task(pool, tenant)
    cloud = await make_task(pool, tenant, job=await _job(pool, sibling.job_id), cloud=True)
    # One that had asked to stop: it ends cancelled, its reason kept.
    stopping = await make_task(pool, tenant)
    await jobs.request_job_cancel(pool, stopping.job_id, "cancelled: by the test", None)

    failing = {t.job_id for t in [*held, *queued, *pair, sibling]}
    ids = [*failing, stopping.job_id]
    before = {j: await _job(pool, j) for j in ids}
    events_before = {j: len(await _events(pool, j)) for j in ids}
    waits = [await parked_wait(far, tenant, job) for job in before.values()]
    notices.expected = set(ids)

    async with open_channel(f"127.0.0.1:{near.port}", ADMIN_TOKEN) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        await admin.DeactivateAgent(admin_pb2.DeactivateAgentRequest(agent_id=runtime))

    woken = await asyncio.wait_for(asyncio.gather(*waits), 30)
    assert {w.id: w.state for w in woken} == {
        j: JobState.CANCELLED if j == stopping.job_id else JobState.FAILED for j in ids
    }
    says = f"agent 'test agent' ({tenant.agent_id}) was deactivated"
    fails = {j: before[j] for j in failing}
    await _moved_each_once(pool, tenant, fails, notices, events_before, JobState.FAILED, says)
    for job_id in failing:
        assert says in (await _job(pool, job_id)).error_message
    ended = await _job(pool, stopping.job_id)
    assert ended.state is JobState.CANCELLED
    assert ended.error_message == "cancelled: by the test"
    assert "stopped task test" in (await _events(pool, stopping.job_id))[-1]
    assert await _task_state(pool, stopping.id) is TaskState.CANCELLED
    assert await _task_state(pool, cloud.id) is TaskState.CANCELLED, "the sibling never starts"
    for task in [*held, *queued, *pair]:
        assert await _task_state(pool, task.id) is TaskState.FAILED


async def test_deleting_a_pipeline_cancels_each_ready_run_with_its_own_event_version_and_notice(
    near: Running, far: Running, pool: asyncpg.Pool, tenant: Tenant, notices: Notices
) -> None:
    pipeline = await make_pipeline(pool, tenant.workspace_id)
    runs = [
        await jobs.insert_job(
            pool,
            id=uuid.uuid4(),
            workspace_id=tenant.workspace_id,
            kind=JobKind.RUN,
            state=JobState.READY,
            pipeline_id=pipeline.id,
            now=None,
        )
        for _ in range(4)
    ]
    before = {r.id: r for r in runs}
    events_before = {r.id: len(await _events(pool, r.id)) for r in runs}
    # A READY run answers WaitJob at once (it would never end): watch it instead.
    watched = [
        asyncio.create_task(_last(far.jobs.watch(tenant.workspace_id, r.id, r.version)))
        for r in runs
    ]
    notices.expected = set(before)

    async with open_channel(f"127.0.0.1:{near.port}", tenant.api_key) as channel:
        stub = pipelines_pb2_grpc.PipelineServiceStub(channel)
        await stub.DeletePipeline(pipelines_pb2.DeletePipelineRequest(pipeline_id=str(pipeline.id)))

    seen = await asyncio.wait_for(asyncio.gather(*watched), 30)
    assert {j.id: j.state for j in seen} == dict.fromkeys(before, JobState.CANCELLED)
    says = f"its pipeline {pipeline.name} was deleted"
    await _moved_each_once(pool, tenant, before, notices, events_before, JobState.CANCELLED, says)


async def _last(snapshots: AsyncIterator[Job]) -> Job:
    last = None
    async for job in snapshots:
        last = job
    assert last is not None
    return last
