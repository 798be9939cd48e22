"""Test, discover and preview: interactive calls answered by whichever
runtime the connection is placed on (docs/flows.md).

Each call is a job with one task on the connection's runtime (the cloud
worker, or its agent); the RPC blocks, bounded, on the job through the watch
hub, so an edge connection answers as synchronously as a cloud one and the
call leaves a job in the history. One attempt: an interactive caller wants
the failure, not a retry.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple
from uuid import UUID

from setu_client.clock import Clock
from setu_client.errors import DeadlineExceeded, NotFound
from setu_server.models import CLOUD, Job, JobKind, JobState, Placement, TaskKind, runtime_name
from setu_server.service import naming
from setu_server.service.agents import AgentPresence
from setu_server.service.jobs import JobService
from setu_server.store import connections, jobs, tasks
from setu_server.store.db import Database, transaction
from setu_tasks.specs import ConnectionSpec

DEFAULT_TIMEOUT_SECONDS = 30.0


class Runtime(NamedTuple):
    """Where an operation ran: "cloud" or "agent:<id>", and as people read
    it ("agent edge-1", service/naming.py)."""

    runtime: str
    label: str


class ConnectionOps:
    def __init__(
        self,
        pool: Database,
        clock: Clock,
        job_service: JobService,
        presence: AgentPresence | None = None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._jobs = job_service
        self._presence = presence or AgentPresence(pool, clock)

    async def run(
        self,
        workspace_id: UUID,
        connection_id: UUID,
        kind: TaskKind,
        params: dict[str, Any],
        timeout_seconds: float,
    ) -> tuple[Job, Runtime]:
        """The finished job and the runtime that answered; DeadlineExceeded
        (the job then cancelled) when no answer came in time."""
        found = await connections.get_connection(self._pool, connection_id, workspace_id)
        if found is None:
            raise NotFound(f"connection {connection_id} not found")
        agent_id = found.agent_id if found.placement is Placement.AGENT else None
        if agent_id is not None:
            await self._presence.require_online(self._pool, agent_id)
        runtime = runtime_name(str(agent_id) if agent_id else CLOUD)
        names = await naming.names_for(self._pool, workspace_id, naming.named_agents(runtime))
        label = names.label(runtime)
        spec = ConnectionSpec(str(found.id), found.provider, found.config)
        now = self._clock.sql_now()
        async with transaction(self._pool) as conn:
            job = await jobs.insert_job(
                conn,
                id=uuid.uuid4(),
                workspace_id=workspace_id,
                kind=JobKind(kind.value),
                state=JobState.PENDING,
                now=now,
                connection_id=found.id,
                params=params,
            )
            await tasks.insert_task(
                conn,
                id=uuid.uuid4(),
                job_id=job.id,
                workspace_id=workspace_id,
                kind=kind,
                agent_id=agent_id,
                max_attempts=1,
                payload={
                    "connection": spec.to_payload(),
                    "workspace_id": str(workspace_id),  # whose secrets, in the cloud
                    **params,
                },
                now=now,
            )
            await jobs.insert_job_event(
                conn, job.id, f"Dispatched {kind.value} of {found.name} to {runtime}", now=now
            )
        timeout = timeout_seconds or DEFAULT_TIMEOUT_SECONDS
        done = await self._jobs.wait(workspace_id, job.id, timeout)
        if not done.state.terminal:
            await self._jobs.cancel(workspace_id, job.id, f"no answer within {timeout:g} s")
            raise DeadlineExceeded(
                f"{label} did not answer the {kind.value} of {found.name} within "
                f"{timeout:g} s (job {job.id}); it may be busy: try again, or raise timeout_seconds"
            )
        return done, Runtime(runtime, label)
