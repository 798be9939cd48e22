"""Jobs as clients see them."""

from __future__ import annotations

from uuid import UUID

import asyncpg

from setu_client.clock import Clock
from setu_client.errors import JobNotFound
from setu_server.models import Job
from setu_server.store import jobs


class JobService:
    def __init__(self, pool: asyncpg.Pool, clock: Clock) -> None:
        self._pool = pool
        self._clock = clock

    async def get(self, workspace_id: UUID, job_id: UUID) -> Job:
        job = await jobs.get_job(self._pool, job_id, workspace_id)
        if job is None:
            raise JobNotFound(f"job {job_id} not found")
        return job
