"""Runs of pipelines: submitting one, and dispatching its first task.

A run snapshots its pipeline into `job.params` at submit, so an edit made
while it runs (or before a retry) never changes what it moves. Dispatch
follows placement (service.placement): a run whose first stage sits on an
agent needs that agent online, or it fails at once with how to fix it.
"""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

import asyncpg
from setu_agent.engine.operators import SpecError, parse_spec

from setu_client.clock import Clock
from setu_client.errors import AgentOffline, FailedPrecondition, NotFound
from setu_server.models import (
    Job,
    JobKind,
    JobState,
    PipelineForRun,
    runtime_name,
)
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.placement import RunPlacement, placement
from setu_server.store import jobs, runs, tasks, tenancy
from setu_server.store.db import Executor, transaction

# Attempts of a run's tasks: a retry resumes where the last one stopped.
RUN_TASK_ATTEMPTS = 3


def snapshot(pipeline: PipelineForRun, where: RunPlacement) -> dict[str, Any]:
    return {
        "pipeline": {
            "name": pipeline.name,
            "streams": pipeline.streams,
            "spec": pipeline.spec,
            "write_mode": pipeline.write_mode.value,
            "source_connection_id": str(pipeline.source.id),
            "destination_connection_id": str(pipeline.destination.id),
        },
        "placement": where.to_dict(),
    }


def placement_of(job: Job) -> RunPlacement:
    saved = job.params.get("placement", {})

    def agent(runtime: str | None) -> UUID | None:
        return UUID(runtime) if runtime and runtime != "cloud" else None

    return RunPlacement(agent(saved.get("extract")), agent(saved.get("load")))


class RunService:
    def __init__(self, pool: asyncpg.Pool, clock: Clock, lifecycle: JobLifecycle) -> None:
        self._pool = pool
        self._clock = clock
        self._lifecycle = lifecycle

    async def submit(
        self,
        workspace_id: UUID,
        pipeline_id: UUID,
        *,
        start: bool,
        dry_run: bool,
        idempotency_key: str,
    ) -> Job:
        if idempotency_key:
            first = await runs.job_by_idempotency_key(self._pool, workspace_id, idempotency_key)
            if first is not None:
                return first
        pipeline = await runs.pipeline_for_run(self._pool, pipeline_id, workspace_id)
        if pipeline is None:
            raise NotFound(f"pipeline {pipeline_id} not found")
        try:
            parse_spec(pipeline.spec)
        except SpecError as exc:
            raise FailedPrecondition(f"pipeline {pipeline.name} is invalid: {exc}") from exc
        where = placement(pipeline.source, pipeline.destination)
        now = self._clock.sql_now()
        async with transaction(self._pool) as conn:
            job = await jobs.insert_job(
                conn,
                id=uuid.uuid4(),
                workspace_id=workspace_id,
                kind=JobKind.RUN,
                state=JobState.PENDING if start else JobState.READY,
                now=now,
                pipeline_id=pipeline.id,
                params=snapshot(pipeline, where),
                dry_run=dry_run,
                idempotency_key=idempotency_key or None,
            )
            await jobs.insert_event(
                conn,
                job.id,
                f"Run of {pipeline.name} submitted ({where.flow}{', dry run' if dry_run else ''})",
                now=now,
            )
            if start:
                await self.dispatch(conn, job)
        return await self._reread(job)

    async def dispatch(self, db: Executor, job: Job) -> None:
        """The first task of a pending run (also StartJob's dispatcher)."""
        if job.kind is not JobKind.RUN:
            return
        where = placement_of(job)
        if where.first_agent is not None:
            await self._require_online(db, where.first_agent)
        task = await tasks.insert_task(
            db,
            id=uuid.uuid4(),
            job_id=job.id,
            workspace_id=job.workspace_id,
            kind=where.first_task,
            agent_id=where.first_agent,
            max_attempts=RUN_TASK_ATTEMPTS,
            payload={"job_id": str(job.id), "pipeline_id": str(job.pipeline_id)},
            now=self._clock.sql_now(),
        )
        await jobs.insert_event(
            db,
            job.id,
            f"Dispatched {task.kind.value} to {runtime_name(task.runtime)}",
            now=self._clock.sql_now(),
        )

    async def _require_online(self, db: Executor, agent_id: UUID) -> None:
        agent = await tenancy.get_agent(db, agent_id)
        if agent is not None and agent.online(self._clock.now()):
            return
        name = f"agent {agent.name} ({agent_id})" if agent else f"agent {agent_id}"
        if agent is not None and not agent.active:
            raise AgentOffline(
                f"{name} is deactivated; register a new agent and place the connection on it"
            )
        seen = (
            f"last seen {agent.last_seen_at:%Y-%m-%d %H:%M:%S} UTC"
            if agent and agent.last_seen_at
            else "never seen"
        )
        raise AgentOffline(
            f"{name} is offline ({seen}): start it with `setu-agent --server <address> "
            f"--agent-token <token>` and submit the run again"
        )

    async def _reread(self, job: Job) -> Job:
        fresh = await jobs.get_job(self._pool, job.id, job.workspace_id)
        assert fresh is not None
        return fresh
