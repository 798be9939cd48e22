"""CloudRunService: proto in, domain call, proto out."""

from __future__ import annotations

from uuid import UUID

from setu_client._proto.setu.v1 import cloud_pb2 as pb
from setu_client._proto.setu.v1 import cloud_pb2_grpc, common_pb2
from setu_client.errors import InvalidArgument
from setu_server.models import EventLevel, JobOutput
from setu_server.rpc.convert import LEVELS, PHASES, uid
from setu_server.rpc.types import Ctx
from setu_server.service.cloud_runs import CloudRuns
from setu_tasks.codec.cloud import migrate_spec_message
from setu_tasks.codec.common import (
    artifact_of,
    changes_of,
    cursor_of,
    stored_parts_of,
    stream_progress_of,
)
from setu_tasks.results import check_changes

PHASES_BACK = {number: phase for phase, number in PHASES.items()}
LEVELS_BACK = {number: level for level, number in LEVELS.items()}


def _lease(request: pb.TaskLease) -> tuple[UUID, UUID]:
    return uid(request.task_id), uid(request.lease_token)


def _output(output: JobOutput) -> pb.RunOutput:
    return pb.RunOutput(
        stream=output.stream,
        rows_extracted=output.rows_extracted,
        rows_loaded=output.rows_loaded,
        loaded=output.loaded,
    )


class CloudRunServicer(cloud_pb2_grpc.CloudRunServiceServicer):
    def __init__(self, runs: CloudRuns) -> None:
        self._runs = runs

    async def GetMigrateSpec(
        self, request: pb.GetMigrateSpecRequest, context: Ctx
    ) -> pb.MigrateSpec:
        spec = await self._runs.spec(*_lease(request.lease))
        return migrate_spec_message(spec)

    async def RecordRunPlan(
        self, request: pb.RecordRunPlanRequest, context: Ctx
    ) -> pb.RecordRunPlanResponse:
        rows = request.rows_total if request.HasField("rows_total") else None
        phase = None
        if request.phase != common_pb2.PHASE_UNSPECIFIED:
            phase = PHASES_BACK.get(request.phase)
            if phase is None:
                raise InvalidArgument("phase: extract, load or direct, or left unset")
        await self._runs.plan(
            *_lease(request.lease),
            rows,
            request.extract_in_cloud,
            request.load_in_cloud,
            phase,
            request.message,
        )
        return pb.RecordRunPlanResponse()

    async def EnterRunPhase(
        self, request: pb.EnterRunPhaseRequest, context: Ctx
    ) -> pb.EnterRunPhaseResponse:
        phase = PHASES_BACK.get(request.phase)
        if phase is None:
            raise InvalidArgument("phase: extract, load or direct")
        await self._runs.enter_phase(*_lease(request.lease), phase, request.message)
        return pb.EnterRunPhaseResponse()

    async def ReportRunProgress(
        self, request: pb.ReportRunProgressRequest, context: Ctx
    ) -> pb.ReportRunProgressResponse:
        cancel = await self._runs.progress(
            *_lease(request.lease),
            request.rows_extracted,
            request.rows_loaded,
            stored_parts_of(request.stored_parts, "stored_parts"),
            stream_progress_of(request.streams, "streams") if request.streams else None,
        )
        return pb.ReportRunProgressResponse(cancel_requested=cancel)

    async def RecordStaged(
        self, request: pb.RecordStagedRequest, context: Ctx
    ) -> pb.RecordStagedResponse:
        await self._runs.staged(*_lease(request.lease), artifact_of(request.artifact))
        return pb.RecordStagedResponse()

    async def RecordStreamLoaded(
        self, request: pb.RecordStreamLoadedRequest, context: Ctx
    ) -> pb.RecordStreamLoadedResponse:
        changes = changes_of(request.changes) if request.HasField("changes") else None
        if changes is not None:
            check_changes(changes, "changes")
        outputs = await self._runs.stream_loaded(
            *_lease(request.lease),
            request.stream,
            request.rows_extracted,
            request.rows_loaded,
            request.checksum,
            changes,
            cursor_of(request.cursor) if request.HasField("cursor") else None,
            request.message,
            record_progress=request.record_progress,
        )
        return pb.RecordStreamLoadedResponse(outputs=[_output(o) for o in outputs])

    async def ListRunOutputs(
        self, request: pb.ListRunOutputsRequest, context: Ctx
    ) -> pb.ListRunOutputsResponse:
        outputs = await self._runs.outputs(
            *_lease(request.lease), record_progress=request.record_progress
        )
        return pb.ListRunOutputsResponse(outputs=[_output(o) for o in outputs])

    async def AddRunEvent(
        self, request: pb.AddRunEventRequest, context: Ctx
    ) -> pb.AddRunEventResponse:
        level = LEVELS_BACK.get(request.level, EventLevel.INFO)
        await self._runs.event(*_lease(request.lease), request.message, level, request.stream)
        return pb.AddRunEventResponse()
