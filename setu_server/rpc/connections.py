"""ConnectionService: proto in, domain call, proto out."""

from __future__ import annotations

from typing import Any

from setu_client._proto.setu.v1 import common_pb2, connections_pb2_grpc
from setu_client._proto.setu.v1 import connections_pb2 as pb
from setu_client.errors import Aborted, InvalidArgument
from setu_server.models import Connection, Job, JobState, Placement, TaskKind
from setu_server.rpc import convert
from setu_server.rpc.convert import optional_uid, struct_dict, uid
from setu_server.rpc.interceptor import caller_workspace
from setu_server.rpc.types import Ctx
from setu_server.service.connection_ops import ConnectionOps
from setu_server.service.connections import ConnectionDraft, ConnectionService
from setu_tasks.results import PreviewResult, TestResult

PLACEMENTS = {
    Placement.CLOUD: common_pb2.PLACEMENT_CLOUD,
    Placement.AGENT: common_pb2.PLACEMENT_AGENT,
}
PLACEMENTS_BACK = {v: k for k, v in PLACEMENTS.items()} | {
    common_pb2.PLACEMENT_UNSPECIFIED: Placement.CLOUD
}


CATALOG_STATUSES = {
    "active": common_pb2.CATALOG_STATUS_ACTIVE,
    "changed": common_pb2.CATALOG_STATUS_CHANGED,
    "missing": common_pb2.CATALOG_STATUS_MISSING,
}


class ConnectionServicer(connections_pb2_grpc.ConnectionServiceServicer):
    def __init__(self, connections: ConnectionService, ops: ConnectionOps) -> None:
        self._connections = connections
        self._ops = ops

    async def TestConnection(
        self, request: pb.TestConnectionRequest, context: Ctx
    ) -> pb.TestConnectionResponse:
        job, ran = await self._ops.run(
            caller_workspace(),
            uid(request.connection_id),
            TaskKind.TEST,
            {},
            request.timeout_seconds,
        )
        # A failed test ends its job FAILED but still carries the result.
        if job.state is JobState.SUCCEEDED or (job.result or {}).get("kind") == "test":
            tested = TestResult.from_json(job.result)
            ok, message = tested.ok, tested.message
        else:
            ok, message = False, job.error_message
        return pb.TestConnectionResponse(
            ok=ok, message=message, job_id=str(job.id), runtime=ran.runtime, runtime_label=ran.label
        )

    async def DiscoverStreams(
        self, request: pb.DiscoverStreamsRequest, context: Ctx
    ) -> pb.DiscoverStreamsResponse:
        job, ran = await self._ops.run(
            caller_workspace(),
            uid(request.connection_id),
            TaskKind.DISCOVER,
            {},
            request.timeout_seconds,
        )
        streams = [catalog_stream(s) for s in _succeeded(job).get("streams", [])]
        return pb.DiscoverStreamsResponse(
            streams=streams, job_id=str(job.id), runtime=ran.runtime, runtime_label=ran.label
        )

    async def PreviewStream(
        self, request: pb.PreviewStreamRequest, context: Ctx
    ) -> pb.PreviewStreamResponse:
        params = {"stream": request.stream, "limit": request.limit or 20}
        job, ran = await self._ops.run(
            caller_workspace(),
            uid(request.connection_id),
            TaskKind.PREVIEW,
            params,
            request.timeout_seconds,
        )
        result = PreviewResult.from_json(_succeeded(job))
        answer = pb.PreviewStreamResponse(
            job_id=str(job.id), runtime=ran.runtime, runtime_label=ran.label
        )
        answer.columns.extend(column(c.to_dict()) for c in result.columns)
        for row in result.rows:
            answer.rows.add().update(row)
        return answer

    async def CreateConnection(
        self, request: pb.CreateConnectionRequest, context: Ctx
    ) -> pb.Connection:
        draft = draft_of(request, "")
        made = await self._connections.create(
            caller_workspace(), draft, validate_only=request.validate_only
        )
        return connection(made)

    async def GetConnection(self, request: pb.GetConnectionRequest, context: Ctx) -> pb.Connection:
        found = await self._connections.get(caller_workspace(), uid(request.connection_id))
        return connection(found)

    async def ListConnections(
        self, request: pb.ListConnectionsRequest, context: Ctx
    ) -> pb.ListConnectionsResponse:
        found, token = await self._connections.list_connections(
            caller_workspace(), request.provider, request.page_size, request.page_token
        )
        return pb.ListConnectionsResponse(
            connections=[connection(c) for c in found], next_page_token=token
        )

    async def UpdateConnection(
        self, request: pb.UpdateConnectionRequest, context: Ctx
    ) -> pb.Connection:
        updated = await self._connections.update(
            caller_workspace(),
            uid(request.connection_id),
            draft_of(request.connection, "connection."),
            list(request.update_mask.paths),
            validate_only=request.validate_only,
        )
        return connection(updated)

    async def DeleteConnection(
        self, request: pb.DeleteConnectionRequest, context: Ctx
    ) -> pb.DeleteConnectionResponse:
        await self._connections.delete(caller_workspace(), uid(request.connection_id))
        return pb.DeleteConnectionResponse()


def connection(c: Connection) -> pb.Connection:
    message = pb.Connection(
        id=str(c.id),
        workspace_id=str(c.workspace_id),
        name=c.name,
        provider=c.provider,
        placement=PLACEMENTS[c.placement],
        agent_id=str(c.agent_id) if c.agent_id else "",
        created_at=convert.ts(c.created_at),
        updated_at=convert.ts(c.updated_at),
    )
    message.config.update(c.config)
    return message


def draft_of(message: pb.CreateConnectionRequest | pb.Connection, prefix: str) -> ConnectionDraft:
    placement = PLACEMENTS_BACK.get(message.placement)
    if placement is None:
        raise InvalidArgument(f"{prefix}placement: unknown value {message.placement}")
    return ConnectionDraft(
        name=message.name.strip(),
        provider=message.provider.strip(),
        config=struct_dict(message.config),
        placement=placement,
        agent_id=optional_uid(message.agent_id, f"{prefix}agent_id"),
    )


def _succeeded(job: Job) -> dict[str, Any]:
    if job.state is not JobState.SUCCEEDED:
        raise Aborted(job.error_message or f"the {job.kind.value} ended {job.state.value}")
    return job.result or {}


def column(c: dict[str, Any]) -> common_pb2.Column:
    return common_pb2.Column(
        name=str(c["name"]),
        type=str(c["type"]),
        nullable=bool(c.get("nullable", True)),
        sql_type=str(c.get("sql_type", "")),
    )


def catalog_stream(s: dict[str, Any]) -> common_pb2.CatalogStream:
    message = common_pb2.CatalogStream(
        namespace=str(s.get("namespace", "")),
        name=str(s["name"]),
        columns=[column(c) for c in s.get("columns", [])],
        primary_key=[str(k) for k in s.get("primary_key", [])],
        row_estimate=int(s.get("row_estimate", 0)),
        status=CATALOG_STATUSES.get(str(s.get("status")), common_pb2.CATALOG_STATUS_ACTIVE),
    )
    if s.get("discovered_at"):
        message.discovered_at.FromJsonString(str(s["discovered_at"]).replace("+00:00", "Z"))
    return message
