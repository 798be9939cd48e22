"""AgentService: proto in, domain call, proto out."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc, common_pb2
from setu_engine.kinds import RowChanges
from setu_engine.staged.blob import BlobSettings
from setu_engine.values import sqltypes
from setu_engine.values.types import Column, Stream
from setu_server.config import Settings
from setu_server.models import CLOUD, Role, Task, TaskKind
from setu_server.rpc import convert
from setu_server.rpc.convert import WRITE_MODES, uid
from setu_server.rpc.cursors import cursor_of
from setu_server.rpc.interceptor import principal
from setu_server.rpc.types import Ctx
from setu_server.service.agents import AgentPresence
from setu_server.service.runs import RunService
from setu_server.service.tasks import TaskService
from setu_server.worker.endpoints import OwnDatabase
from setu_tasks.codec.common import stored_part_message
from setu_tasks.results import (
    Artifact,
    ArtifactStream,
    DiscoverResult,
    ExtractResult,
    LoadResult,
    MalformedResult,
    MigrateMode,
    MigrateResult,
    PlannedColumn,
    PlannedStream,
    PreviewResult,
    StreamCounts,
    TaskResult,
    TestResult,
)
from setu_tasks.specs import ConnectionSpec

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
    )
    message.payload.update(task.payload)
    return message


def connection_message(spec: ConnectionSpec) -> pb.ConnectionSpec:
    message = pb.ConnectionSpec(connection_id=spec.connection_id, provider=spec.provider)
    message.config.update(spec.config)
    return message


def blob_message(blob: BlobSettings) -> pb.BlobSettings:
    return pb.BlobSettings(
        backend=blob.backend, root=blob.root, endpoint_url=blob.endpoint_url, region=blob.region
    )


# -- the CompleteTaskRequest oneof as a typed result: the server's one edge


def task_result(request: pb.CompleteTaskRequest) -> TaskResult | None:
    """The typed result a runtime reported (None: it sent none), or
    MalformedResult when a field this server does not know came along. Its
    values are checked once the task's kind is known (TaskService.complete)."""
    which = request.WhichOneof("result")
    if which is None:
        return None
    message = getattr(request, which)
    unknown = _unknown_fields(message, f"{which} result")
    if unknown:
        raise MalformedResult(
            f"the {which} result carries fields this server does not know: {', '.join(unknown)}"
        )
    return RESULT_READERS[which](message)


def _unknown_fields(message: Message, path: str) -> list[str]:
    unknown = UnknownFieldSet(message)
    found = [f"{path}.#{unknown[i].field_number}" for i in range(len(unknown))]
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None or descriptor.message_type.GetOptions().map_entry:
            continue
        inner = value if descriptor.is_repeated else [value]
        for i, item in enumerate(inner):
            where = f"{path}.{descriptor.name}" + (f"[{i}]" if descriptor.is_repeated else "")
            found += _unknown_fields(item, where)
    return found


def artifact_of(message: pb.Artifact) -> Artifact:
    streams = tuple(
        ArtifactStream(s.stream, s.rows, tuple(s.parts), s.checksum) for s in message.streams
    )
    return Artifact(message.blob_prefix, streams, message.manifest_path)


def _extract_result(message: pb.ExtractResult) -> ExtractResult:
    # An absent artifact reads as an empty one, which ExtractResult.validate refuses.
    notes = tuple((n.stream, n.message) for n in message.notes)
    return ExtractResult(artifact_of(message.artifact), message.rows_extracted, notes)


def _load_result(message: pb.LoadResult) -> LoadResult:
    changes = {s: changes_of(c) for s, c in message.changes_by_stream.items()}
    return LoadResult(
        message.rows_loaded,
        dict(message.rows_by_stream),
        changes,
        dry_run=message.dry_run,
        planned=tuple(planned_of(p) for p in message.planned),
        notes=tuple((n.stream, n.message) for n in message.notes),
        cursors_by_stream={
            s: cursor_of(c, f"load.cursors_by_stream[{s!r}]")
            for s, c in message.cursors_by_stream.items()
        },
    )


def planned_of(p: pb.PlannedStream) -> PlannedStream:
    return PlannedStream(
        p.stream,
        p.destination,
        p.rows_estimate,
        tuple(_column(c) for c in p.columns),
        tuple(p.key),
        p.schema,
        p.table,
        tuple(p.actions),
        tuple(p.incompatibilities),
        tuple(PlannedColumn(m.column, m.type, m.source, m.destination_type) for m in p.mapping),
    )


def changes_of(message: common_pb2.RowChanges) -> RowChanges:
    return RowChanges(message.inserted, message.updated, message.unchanged)


def changes_message(changes: RowChanges) -> common_pb2.RowChanges:
    return common_pb2.RowChanges(
        inserted=changes.inserted, updated=changes.updated, unchanged=changes.unchanged
    )


def _test_result(message: pb.TestResult) -> TestResult:
    return TestResult(message.ok, message.message)


def _column(column: common_pb2.Column) -> Column:
    try:
        sql_type = sqltypes.canonical(column.sql_type)
    except sqltypes.SqlTypeError as exc:
        raise MalformedResult(f"column {column.name}: {exc}") from None
    return Column(column.name, column.type, column.nullable, sql_type)


def _discover_result(message: pb.DiscoverResult) -> DiscoverResult:
    return DiscoverResult(
        tuple(
            Stream(
                name=s.name,
                columns=tuple(_column(c) for c in s.columns),
                namespace=s.namespace,
                primary_key=tuple(s.primary_key),
                row_estimate=s.row_estimate,
            )
            for s in message.streams
        )
    )


def _preview_result(message: pb.PreviewResult) -> PreviewResult:
    return PreviewResult(
        columns=tuple(_column(c) for c in message.columns),
        rows=tuple(MessageToDict(row) for row in message.rows),
    )


def _migrate_result(message: pb.MigrateResult) -> MigrateResult:
    try:
        mode = MigrateMode(message.mode)
    except ValueError:
        raise MalformedResult(f"migrate result: no mode {message.mode!r}") from None
    return MigrateResult(
        mode,
        rows_extracted=message.rows_extracted,
        rows_loaded=message.rows_loaded,
        streams=tuple(
            StreamCounts(s.stream, s.rows_extracted, s.rows_loaded) for s in message.streams
        ),
        planned=tuple(planned_of(p) for p in message.planned),
        reason=message.reason,
    )


RESULT_READERS: dict[str, Callable[[Any], TaskResult]] = {
    "migrate": _migrate_result,
    "extract": _extract_result,
    "load": _load_result,
    "test": _test_result,
    "discover": _discover_result,
    "preview": _preview_result,
}


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
        answer = pb.ExtractSpec(
            job_id=spec.job_id,
            pipeline_id=spec.pipeline_id,
            source=connection_message(spec.source),
            streams=spec.streams,
            blob_prefix=spec.blob_prefix,
            blob=blob_message(spec.blob),
            write_mode=WRITE_MODES[spec.write_mode],
            cursors=spec.cursors,
            stored_parts=[stored_part_message(p) for p in spec.stored_parts],
        )
        answer.spec.update(spec.spec)
        return answer

    async def GetLoadSpec(self, request: pb.GetLoadSpecRequest, context: Ctx) -> pb.LoadSpec:
        spec = await self._runs.load_spec(
            _runtime(), uid(request.task_id), uid(request.lease_token)
        )
        answer = pb.LoadSpec(
            job_id=spec.job_id,
            pipeline_id=spec.pipeline_id,
            destination=connection_message(spec.destination),
            write_mode=WRITE_MODES[spec.write_mode],
            artifact=pb.Artifact(
                blob_prefix=spec.blob_prefix,
                manifest_path=spec.manifest_path,
                streams=[pb.StagedStream(stream=s) for s in spec.streams],
            ),
            blob=blob_message(spec.blob),
        )
        answer.spec.update(spec.spec)
        return answer

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
        stored = convert.stored_parts_of(request.progress.stored_parts, "progress.stored_parts")
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
