"""The janitor built alone on real PostgreSQL and a local blob folder, its
clock moved by hand: a run's staged data goes once the run has been over
for the retention, only the run's own prefix, one run at a time."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg

from setu_client.clock import FakeClock
from setu_engine.staged.blob import LocalBlobStore
from setu_engine.staged.staging import run_prefix
from setu_server.config import JanitorSettings
from setu_server.maintenance.janitor import Janitor
from setu_server.models import Job, JobKind, JobState
from setu_server.store import jobs, runs
from tests.builders import START
from tests.factories import Tenant, make_pipeline, make_tenant

HOUR = 3600.0
SETTINGS = JanitorSettings(retention_seconds=24 * HOUR, batch=10)


class FlakyBlob(LocalBlobStore):
    """A folder whose deletes fail under the prefixes in `broken`."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.broken: set[str] = set()

    async def delete_prefix(self, prefix: str) -> int:
        if prefix in self.broken:
            raise OSError(f"cannot delete {prefix}")
        return await super().delete_prefix(prefix)


async def setup(pool: asyncpg.Pool, tmp_path: Path) -> tuple[Janitor, FlakyBlob, FakeClock]:
    clock = FakeClock(START)
    blob = FlakyBlob(tmp_path / "blobs")
    return Janitor(pool, clock, blob, SETTINGS), blob, clock


async def staged_run(
    pool: asyncpg.Pool, blob: FlakyBlob, clock: FakeClock, tenant: Tenant, *, ended: bool = True
) -> tuple[Job, str]:
    """A run with one staged part under its own prefix; ended now unless told."""
    pipeline = await make_pipeline(pool, tenant.workspace_id)
    job = await jobs.insert_job(
        pool,
        id=uuid.uuid4(),
        workspace_id=tenant.workspace_id,
        kind=JobKind.RUN,
        state=JobState.PENDING,
        pipeline_id=pipeline.id,
        now=clock.now(),
    )
    prefix = run_prefix(tenant.workspace_id, pipeline.id, job.id)
    await blob.put(f"{prefix}users/part-00000", b"rows")
    await runs.save_artifact(
        pool,
        job_id=job.id,
        task_id=None,
        stream="users",
        blob_prefix=prefix,
        parts=["users/part-00000"],
        rows=1,
        checksum="",
        now=clock.now(),
    )
    if ended:
        await jobs.transition_job(
            pool, job.id, JobState.CANCELLED, now=clock.now(), message="stopped"
        )
    return job, prefix


async def test_a_run_is_purged_once_past_the_retention_and_a_live_run_never(
    pool: asyncpg.Pool, tmp_path: Path
) -> None:
    janitor, blob, clock = await setup(pool, tmp_path)
    tenant = await make_tenant(pool)
    ended, ended_prefix = await staged_run(pool, blob, clock, tenant)
    _, live_prefix = await staged_run(pool, blob, clock, tenant, ended=False)

    clock.advance(24 * HOUR)
    assert (await janitor.run_once()).purged == [], "only once the retention has passed"
    clock.advance(1)
    assert (await janitor.run_once()).purged == [ended.id]
    assert await blob.list(ended_prefix) == []
    assert await blob.list(live_prefix) == [f"{live_prefix}users/part-00000"]
    assert (await janitor.run_once()).purged == [], "a purged run is marked"


async def test_only_the_runs_own_prefix_is_deleted_whatever_an_artifact_says(
    pool: asyncpg.Pool, tmp_path: Path
) -> None:
    janitor, blob, clock = await setup(pool, tmp_path)
    tenant, other = await make_tenant(pool), await make_tenant(pool)
    job, prefix = await staged_run(pool, blob, clock, tenant)
    _, foreign = await staged_run(pool, blob, clock, other, ended=False)
    await runs.save_artifact(
        pool,
        job_id=job.id,
        task_id=None,
        stream="orders",
        blob_prefix=foreign,  # another workspace's run
        parts=[],
        rows=0,
        checksum="",
        now=clock.now(),
    )
    clock.advance(25 * HOUR)

    assert (await janitor.run_once()).purged == [job.id]
    assert await blob.list(prefix) == []
    assert await blob.list(foreign) == [f"{foreign}users/part-00000"]


async def test_a_failed_delete_skips_its_run_and_the_next_pass_retries_it(
    pool: asyncpg.Pool, tmp_path: Path
) -> None:
    janitor, blob, clock = await setup(pool, tmp_path)
    tenant = await make_tenant(pool)
    stuck, stuck_prefix = await staged_run(pool, blob, clock, tenant)
    fine, _ = await staged_run(pool, blob, clock, tenant)
    clock.advance(25 * HOUR)
    blob.broken.add(stuck_prefix)

    result = await janitor.run_once()
    assert (result.purged, result.skipped) == ([fine.id], [stuck.id])
    blob.broken.clear()
    assert (await janitor.run_once()).purged == [stuck.id]
    assert await blob.list(stuck_prefix) == []


async def test_a_pass_stops_at_its_batch(pool: asyncpg.Pool, tmp_path: Path) -> None:
    clock = FakeClock(START)
    blob = FlakyBlob(tmp_path / "blobs")
    janitor = Janitor(pool, clock, blob, JanitorSettings(retention_seconds=HOUR, batch=2))
    tenant = await make_tenant(pool)
    for _ in range(3):
        await staged_run(pool, blob, clock, tenant)
    clock.advance(2 * HOUR)

    assert len((await janitor.run_once()).purged) == 2
    assert len((await janitor.run_once()).purged) == 1
