"""PipelineService: proto in, domain call, proto out."""

from __future__ import annotations

from setu_client._proto.setu.v1 import common_pb2, pipelines_pb2_grpc
from setu_client._proto.setu.v1 import pipelines_pb2 as pb
from setu_client.errors import InvalidArgument
from setu_server.models import Pipeline, WriteMode
from setu_server.rpc import convert
from setu_server.rpc.connections import draft_of
from setu_server.rpc.convert import WRITE_MODES, optional_uid, struct_dict, uid
from setu_server.rpc.interceptor import caller_workspace
from setu_server.rpc.types import Ctx
from setu_server.service.connections import ConnectionDraft
from setu_server.service.pipelines import End, NewConnections, PipelineDraft, PipelineService
from setu_server.store.stream_state import StreamState
from setu_tasks.codec.common import cursor_message

WRITE_MODES_BACK = {v: k for k, v in WRITE_MODES.items()} | {
    common_pb2.WRITE_MODE_UNSPECIFIED: WriteMode.APPEND
}


class PipelineServicer(pipelines_pb2_grpc.PipelineServiceServicer):
    def __init__(self, pipelines: PipelineService) -> None:
        self._pipelines = pipelines

    async def CreatePipeline(self, request: pb.CreatePipelineRequest, context: Ctx) -> pb.Pipeline:
        made = await self._pipelines.create(
            caller_workspace(),
            _draft(request, ""),
            validate_only=request.validate_only,
            new_connections=_new_connections(request),
        )
        return pipeline(made)

    async def GetPipeline(self, request: pb.GetPipelineRequest, context: Ctx) -> pb.Pipeline:
        return pipeline(await self._pipelines.get(caller_workspace(), uid(request.pipeline_id)))

    async def ListPipelines(
        self, request: pb.ListPipelinesRequest, context: Ctx
    ) -> pb.ListPipelinesResponse:
        found, token = await self._pipelines.list_pipelines(
            caller_workspace(), request.page_size, request.page_token
        )
        return pb.ListPipelinesResponse(
            pipelines=[pipeline(p) for p in found], next_page_token=token
        )

    async def UpdatePipeline(self, request: pb.UpdatePipelineRequest, context: Ctx) -> pb.Pipeline:
        updated = await self._pipelines.update(
            caller_workspace(),
            uid(request.pipeline_id),
            _draft(request.pipeline, "pipeline."),
            list(request.update_mask.paths),
            validate_only=request.validate_only,
            new_connections=_new_connections(request),
        )
        return pipeline(updated)

    async def DeletePipeline(
        self, request: pb.DeletePipelineRequest, context: Ctx
    ) -> pb.DeletePipelineResponse:
        await self._pipelines.delete(caller_workspace(), uid(request.pipeline_id))
        return pb.DeletePipelineResponse()

    async def GetPipelineState(
        self, request: pb.GetPipelineStateRequest, context: Ctx
    ) -> pb.PipelineState:
        found = await self._pipelines.state(caller_workspace(), uid(request.pipeline_id))
        return pb.PipelineState(
            pipeline_id=request.pipeline_id, streams=[_stream_state(s) for s in found]
        )

    async def ResetPipelineState(
        self, request: pb.ResetPipelineStateRequest, context: Ctx
    ) -> pb.ResetPipelineStateResponse:
        reset = await self._pipelines.reset_state(
            caller_workspace(), uid(request.pipeline_id), request.stream or None
        )
        return pb.ResetPipelineStateResponse(streams=reset)


def _stream_state(state: StreamState) -> pb.StreamState:
    return pb.StreamState(
        stream=state.stream,
        cursor=cursor_message(state.cursor),
        rows=state.rows,
        last_job_id=str(state.last_job_id) if state.last_job_id else "",
        updated_at=convert.ts(state.updated_at),
    )


def pipeline(p: Pipeline) -> pb.Pipeline:
    message = pb.Pipeline(
        id=str(p.id),
        workspace_id=str(p.workspace_id),
        name=p.name,
        source_connection_id=str(p.source_connection_id),
        destination_connection_id=str(p.destination_connection_id),
        streams=p.streams,
        write_mode=WRITE_MODES[p.write_mode],
        schedule=p.schedule,
        paused=p.paused,
        next_run_at=convert.ts(p.next_run_at),
        created_at=convert.ts(p.created_at),
        updated_at=convert.ts(p.updated_at),
    )
    message.spec.update(p.spec)
    return message


def _draft(message: pb.CreatePipelineRequest | pb.Pipeline, prefix: str) -> PipelineDraft:
    write_mode = WRITE_MODES_BACK.get(message.write_mode)
    if write_mode is None:
        raise InvalidArgument(f"{prefix}write_mode: unknown value {message.write_mode}")
    return PipelineDraft(
        name=message.name.strip(),
        source_connection_id=optional_uid(
            message.source_connection_id, f"{prefix}source_connection_id"
        ),
        destination_connection_id=optional_uid(
            message.destination_connection_id, f"{prefix}destination_connection_id"
        ),
        streams=list(message.streams),
        spec=struct_dict(message.spec),
        write_mode=write_mode,
        schedule=message.schedule.strip(),
        paused=message.paused,
    )


def _new_connections(
    request: pb.CreatePipelineRequest | pb.UpdatePipelineRequest,
) -> NewConnections:
    """The connections a validate_only call names in place of an id."""
    found: dict[End, ConnectionDraft] = {}
    if request.HasField("new_source_connection"):
        found["source"] = draft_of(request.new_source_connection, "new_source_connection.")
    if request.HasField("new_destination_connection"):
        wanted = request.new_destination_connection
        found["destination"] = draft_of(wanted, "new_destination_connection.")
    return found
