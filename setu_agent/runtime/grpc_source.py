"""Tasks from setu-server over gRPC: how an agent asks for work."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict, ParseDict

from setu_agent.runtime.task import LeasedTask
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc
from setu_client.errors import from_rpc_error

# The client's own timeout on a lease long-poll: above the server's wait so
# the server's empty answer always wins the race (DESIGN §5).
LEASE_TIMEOUT_MARGIN_SECONDS = 15.0
CALL_TIMEOUT_SECONDS = 30.0

KIND_NAMES = {v: k.removeprefix("TASK_KIND_").lower() for k, v in pb.TaskKind.items()}

# Which CompleteTaskRequest field carries the result of each task kind.
RESULT_FIELDS = {
    "extract": "extract",
    "load": "load",
    "test": "test",
    "discover": "discover",
    "preview": "preview",
}


class GrpcTaskSource:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = agents_pb2_grpc.AgentServiceStub(channel)

    async def check_in(self, version: str, capabilities: list[str], hostname: str) -> Any:
        request = pb.CheckInRequest(version=version, capabilities=capabilities, hostname=hostname)
        return await self._call(self._stub.CheckIn, request)

    async def lease(self, wait_seconds: float) -> LeasedTask | None:
        answer: pb.LeaseTaskResponse = await self._call(
            self._stub.LeaseTask,
            pb.LeaseTaskRequest(wait_seconds=int(wait_seconds)),
            timeout=wait_seconds + LEASE_TIMEOUT_MARGIN_SECONDS,
        )
        if not answer.HasField("task"):
            return None
        task = answer.task
        return LeasedTask(
            id=task.id,
            job_id=task.job_id,
            kind=KIND_NAMES.get(task.kind, "unspecified"),
            attempt=task.attempt,
            max_attempts=task.max_attempts,
            lease_token=task.lease_token,
            payload=MessageToDict(task.payload),
        )

    async def heartbeat(self, task: LeasedTask, progress: dict[str, Any]) -> bool:
        request = pb.HeartbeatRequest(
            task_id=task.id,
            lease_token=task.lease_token,
            progress=ParseDict(progress, pb.TaskProgress(), ignore_unknown_fields=True),
        )
        answer: pb.HeartbeatResponse = await self._call(self._stub.Heartbeat, request)
        return answer.cancel_requested

    async def complete(self, task: LeasedTask, result: dict[str, Any]) -> None:
        request = pb.CompleteTaskRequest(task_id=task.id, lease_token=task.lease_token)
        field = RESULT_FIELDS.get(task.kind)
        if field is not None and result:
            ParseDict(result, getattr(request, field), ignore_unknown_fields=True)
        await self._call(self._stub.CompleteTask, request)

    async def fail(self, task: LeasedTask, error: str, retryable: bool) -> None:
        request = pb.FailTaskRequest(
            task_id=task.id,
            lease_token=task.lease_token,
            error_message=error[:10_000] or "failed",
            retryable=retryable,
        )
        await self._call(self._stub.FailTask, request)

    async def _call(self, method: Any, request: Any, timeout: float = CALL_TIMEOUT_SECONDS) -> Any:
        try:
            return await method(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from exc
