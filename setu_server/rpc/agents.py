"""AgentService: proto in, domain call, proto out."""

from __future__ import annotations

import contextlib

from google.protobuf.json_format import MessageToDict

from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc
from setu_server.config import Settings
from setu_server.models import CLOUD, Role, Task, TaskKind
from setu_server.rpc import convert
from setu_server.rpc.convert import uid
from setu_server.rpc.interceptor import principal
from setu_server.rpc.types import Ctx
from setu_server.service.agents import AgentPresence
from setu_server.service.runs import RunService
from setu_server.service.tasks import TaskService
from setu_server.worker.endpoints import OwnDatabase
from setu_tasks.codec.agents import extract_spec_message, load_spec_message, task_result
from setu_tasks.codec.common import stored_parts_of, stream_progress_of

TASK_KINDS = {k: getattr(pb, f"TASK_KIND_{k.name}") for k in TaskKind}
# Answer a long-poll this long before the caller's deadline.
DEADLINE_MARGIN_SECONDS = 1.0


def _runtime() -> str:
    """The queue of the calling runtime: its agent id, or the cloud's."""
    me = principal()
    if me.role is Role.WORKER:
        return CLOUD
    assert me.agent_id is not None, "agent calls are authenticated with an agent token"
    return str(me.agent_id)


def task_message(task: Task) -> pb.Task:
    message = pb.Task(
        id=str(task.id),
        job_id=str(task.job_id),
        kind=TASK_KINDS[task.kind],
        attempt=task.attempt,
        max_attempts=task.max_attempts,
        lease_token=str(task.lease_token),
        lease_expires_at=convert.ts(task.lease_expires_at),
        free_retries=task.free_retries,
    )
    message.payload.update(task.payload)
    return message


class AgentServicer(agents_pb2_grpc.AgentServiceServicer):
    def __init__(
        self,
        presence: AgentPresence,
        tasks: TaskService,
        runs: RunService,
        settings: Settings,
        own_database: OwnDatabase | None = None,
    ) -> None:
        self._presence = presence
        self._tasks = tasks
        self._runs = runs
        self._settings = settings
        # Named to cloud workers at check-in: the server's own database.
        self._own = own_database or OwnDatabase()

    async def GetExtractSpec(
        self, request: pb.GetExtractSpecRequest, context: Ctx
    ) -> pb.ExtractSpec:
        spec = await self._runs.extract_spec(
            _runtime(), uid(request.task_id), uid(request.lease_token)
        )
        return extract_spec_message(spec)

    async def GetLoadSpec(self, request: pb.GetLoadSpecRequest, context: Ctx) -> pb.LoadSpec:
        spec = await self._runs.load_spec(
            _runtime(), uid(request.task_id), uid(request.lease_token)
        )
        return load_spec_message(spec)

    async def CheckIn(self, request: pb.CheckInRequest, context: Ctx) -> pb.CheckInResponse:
        me = principal()
        if me.role is Role.WORKER:
            return pb.CheckInResponse(
                lease_wait_cap_seconds=int(self._tasks.policy.wait_cap_seconds),
                lease_ttl_seconds=int(self._tasks.policy.ttl_seconds),
                protected_endpoints=self._own.endpoints(),
                protected_local_ports=self._own.local_ports,
                protected_socket_folders=self._own.socket_folders,
            )
        assert me.agent_id is not None
        agent = await self._presence.check_in(
            me.agent_id, request.version, list(request.capabilities), request.hostname
        )
        return pb.CheckInResponse(
            agent_id=str(agent.id),
            workspace_id=str(agent.workspace_id),
            server_time=convert.ts(agent.last_seen_at),
            lease_wait_cap_seconds=int(self._tasks.policy.wait_cap_seconds),
            lease_ttl_seconds=int(self._tasks.policy.ttl_seconds),
        )

    async def LeaseTask(self, request: pb.LeaseTaskRequest, context: Ctx) -> pb.LeaseTaskResponse:
        wait = float(request.wait_seconds)
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, remaining - DEADLINE_MARGIN_SECONDS)
        agent_id = principal().agent_id
        # A runtime that predates max_tasks reads `task`: it gets one, there.
        many = request.HasField("max_tasks")
        async with self._presence.leasing(agent_id) if agent_id else contextlib.nullcontext():
            leased = await self._tasks.lease_many(
                _runtime(), wait, request.max_tasks if many else 1
            )
        if many:
            return pb.LeaseTaskResponse(tasks=[task_message(t) for t in leased])
        return pb.LeaseTaskResponse(task=task_message(leased[0]) if leased else None)

    async def SignOff(self, request: pb.SignOffRequest, context: Ctx) -> pb.SignOffResponse:
        agent_id = principal().agent_id
        if agent_id is not None:  # a cloud worker has no presence to end
            await self._presence.sign_off(agent_id, request.reason.strip())
        return pb.SignOffResponse()

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Ctx) -> pb.HeartbeatResponse:
        progress = (
            MessageToDict(request.progress, preserving_proto_field_name=True)
            if request.HasField("progress")
            else None
        )
        # An extract's stored parts go in the run's books, not in the task's progress.
        stored = stored_parts_of(request.progress.stored_parts, "progress.stored_parts")
        stream_progress_of(request.progress.streams, "progress.streams")  # refused if out of bounds
        if progress is not None:
            progress.pop("stored_parts", None)
        expires, cancel = await self._tasks.heartbeat(
            _runtime(), uid(request.task_id), uid(request.lease_token), progress, stored
        )
        return pb.HeartbeatResponse(lease_expires_at=convert.ts(expires), cancel_requested=cancel)

    async def CompleteTask(
        self, request: pb.CompleteTaskRequest, context: Ctx
    ) -> pb.CompleteTaskResponse:
        task = await self._tasks.complete(
            _runtime(),
            uid(request.task_id),
            uid(request.lease_token),
            task_result(request),
            lease_next=request.lease_next,
        )
        return pb.CompleteTaskResponse(next=task_message(task) if task else None)

    async def FailTask(self, request: pb.FailTaskRequest, context: Ctx) -> pb.FailTaskResponse:
        retry = await self._tasks.fail(
            _runtime(),
            uid(request.task_id),
            uid(request.lease_token),
            request.error_message.strip(),
            request.retryable,
        )
        return pb.FailTaskResponse(will_retry=retry)

    async def ReleaseTask(
        self, request: pb.ReleaseTaskRequest, context: Ctx
    ) -> pb.ReleaseTaskResponse:
        free, again = await self._tasks.release(
            _runtime(),
            uid(request.task_id),
            uid(request.lease_token),
            outage=request.reason == pb.RELEASE_REASON_OUTAGE,
            message=request.message.strip() or "handed back",
            checkpoint=request.checkpoint.strip(),
        )
        return pb.ReleaseTaskResponse(free=free, will_retry=again)
