"""The cloud worker: the agents' runtime loop, inside setu-server, for tasks
placed in the cloud. It reaches the store directly instead of over gRPC; any
number of replicas share the cloud queue (the lease is SKIP LOCKED)."""

from __future__ import annotations

import uuid
from typing import Any

from setu_agent.results import TaskResult
from setu_agent.runtime import LeasedTask, Runtime
from setu_agent.runtime.task import Handler
from setu_server.models import CLOUD
from setu_server.service.tasks import TaskService


class LocalTaskSource:
    """The TaskSource of the cloud runtime: TaskService calls, no network."""

    def __init__(self, tasks: TaskService) -> None:
        self._tasks = tasks

    async def lease(self, wait_seconds: float) -> LeasedTask | None:
        task = await self._tasks.lease(CLOUD, wait_seconds)
        if task is None:
            return None
        return LeasedTask(
            id=str(task.id),
            job_id=str(task.job_id),
            kind=task.kind.value,
            attempt=task.attempt,
            max_attempts=task.max_attempts,
            lease_token=str(task.lease_token),
            payload=task.payload,
        )

    async def heartbeat(self, task: LeasedTask, progress: dict[str, Any]) -> bool:
        _, cancel = await self._tasks.heartbeat(
            CLOUD, uuid.UUID(task.id), uuid.UUID(task.lease_token), progress
        )
        return cancel

    async def complete(self, task: LeasedTask, result: TaskResult) -> None:
        # The same typed result an agent's report becomes on the server.
        await self._tasks.complete(CLOUD, uuid.UUID(task.id), uuid.UUID(task.lease_token), result)

    async def fail(self, task: LeasedTask, error: str, retryable: bool) -> None:
        await self._tasks.fail(
            CLOUD, uuid.UUID(task.id), uuid.UUID(task.lease_token), error, retryable
        )


def cloud_worker(tasks: TaskService, handlers: dict[str, Handler], concurrency: int) -> Runtime:
    return Runtime(
        LocalTaskSource(tasks),
        handlers,
        name="cloud worker",
        concurrency=concurrency,
        lease_ttl_seconds=tasks.policy.ttl_seconds,
        lease_wait_seconds=tasks.policy.wait_cap_seconds,
    )
