"""The books of a run the cloud moves: what a `migrate` task reads of its
run and writes as it goes, through the server (CloudRunService), since a
cloud worker holds no database credentials. Every call presents the task's
lease: a worker can touch only the runs it is working on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from setu_agent.runtime.grpc_source import CALL_TIMEOUT_SECONDS
from setu_client._proto.setu.v1 import cloud_pb2, cloud_pb2_grpc, common_pb2
from setu_client.errors import from_rpc_error
from setu_engine.kinds import RowChanges
from setu_engine.staged.staging import StoredPart
from setu_engine.values.window import CursorMark
from setu_tasks.codec.cloud import PHASE_MESSAGES, migrate_spec_of
from setu_tasks.codec.common import (
    artifact_message,
    changes_message,
    cursor_message,
    stored_part_message,
    stream_progress_message,
)
from setu_tasks.results import Artifact
from setu_tasks.specs import LeasedTask, MigrateSpec

LEVELS = {
    "info": common_pb2.EVENT_LEVEL_INFO,
    "warning": common_pb2.EVENT_LEVEL_WARNING,
    "error": common_pb2.EVENT_LEVEL_ERROR,
}


@dataclass(frozen=True)
class RunOutput:
    stream: str
    rows_extracted: int
    rows_loaded: int
    loaded: bool


class RunBook(Protocol):
    """One run's books, as its leased migrate task keeps them."""

    async def spec(self) -> MigrateSpec: ...

    async def plan(
        self,
        *,
        rows_total: int | None = None,
        extract: bool = False,
        load: bool = False,
        phase: str | None = None,
        message: str = "",
    ) -> None:
        """The plan; with `phase` the run enters it too, and `message` goes in
        its timeline, in one call."""
        ...

    async def enter_phase(self, phase: str, message: str) -> None: ...

    async def progress(
        self,
        extracted: int,
        loaded: int,
        stored: Sequence[StoredPart] = (),
        streams: dict[str, tuple[int, int]] | None = None,
    ) -> bool:
        """Writes the run's counts (and each moving stream's (extracted,
        loaded), when given) and records the parts `stored` since the last
        call; True when the run asked to cancel."""
        ...

    async def staged(self, artifact: Artifact) -> None:
        """What the extract staged, and the run's phase set to load."""
        ...

    async def stream_loaded(
        self,
        stream: str,
        extracted: int,
        loaded: int,
        checksum: str,
        changes: RowChanges | None = None,
        cursor: CursorMark | None = None,
        message: str = "",
        *,
        record_progress: bool = False,
    ) -> list[RunOutput]:
        """A stream committed, with `message` in the timeline, in one call.
        With `record_progress` (the migrate's last stream) the run's counts
        are written from its outputs, which are returned; else []."""
        ...

    async def outputs(self, *, record_progress: bool = False) -> list[RunOutput]:
        """The run's outputs; with `record_progress` their sums become the
        run's counts in the same call."""
        ...

    async def event(self, message: str, *, level: str = "info", stream: str = "") -> None: ...


class GrpcRunBook:
    """RunBook over CloudRunService, for one leased task."""

    def __init__(self, channel: grpc.aio.Channel, task: LeasedTask) -> None:
        self._stub = cloud_pb2_grpc.CloudRunServiceStub(channel)
        self._lease = cloud_pb2.TaskLease(task_id=task.id, lease_token=task.lease_token)

    async def spec(self) -> MigrateSpec:
        answer: cloud_pb2.MigrateSpec = await self._call(
            self._stub.GetMigrateSpec, cloud_pb2.GetMigrateSpecRequest(lease=self._lease)
        )
        return migrate_spec_of(answer)

    async def plan(
        self,
        *,
        rows_total: int | None = None,
        extract: bool = False,
        load: bool = False,
        phase: str | None = None,
        message: str = "",
    ) -> None:
        request = cloud_pb2.RecordRunPlanRequest(
            lease=self._lease,
            rows_total=rows_total,
            extract_in_cloud=extract,
            load_in_cloud=load,
            phase=PHASE_MESSAGES[phase] if phase else common_pb2.PHASE_UNSPECIFIED,
            message=message[:2000],
        )
        await self._call(self._stub.RecordRunPlan, request)

    async def enter_phase(self, phase: str, message: str) -> None:
        request = cloud_pb2.EnterRunPhaseRequest(
            lease=self._lease, phase=PHASE_MESSAGES[phase], message=message[:2000]
        )
        await self._call(self._stub.EnterRunPhase, request)

    async def progress(
        self,
        extracted: int,
        loaded: int,
        stored: Sequence[StoredPart] = (),
        streams: dict[str, tuple[int, int]] | None = None,
    ) -> bool:
        request = cloud_pb2.ReportRunProgressRequest(
            lease=self._lease,
            rows_extracted=extracted,
            rows_loaded=loaded,
            stored_parts=[stored_part_message(p) for p in stored],
            streams=stream_progress_message(streams or {}),
        )
        answer: cloud_pb2.ReportRunProgressResponse = await self._call(
            self._stub.ReportRunProgress, request
        )
        return answer.cancel_requested

    async def staged(self, artifact: Artifact) -> None:
        request = cloud_pb2.RecordStagedRequest(
            lease=self._lease, artifact=artifact_message(artifact)
        )
        await self._call(self._stub.RecordStaged, request)

    async def stream_loaded(
        self,
        stream: str,
        extracted: int,
        loaded: int,
        checksum: str,
        changes: RowChanges | None = None,
        cursor: CursorMark | None = None,
        message: str = "",
        *,
        record_progress: bool = False,
    ) -> list[RunOutput]:
        request = cloud_pb2.RecordStreamLoadedRequest(
            message=message[:2000],
            record_progress=record_progress,
            lease=self._lease,
            stream=stream,
            rows_extracted=extracted,
            rows_loaded=loaded,
            checksum=checksum,
            changes=changes_message(changes) if changes is not None else None,
            cursor=cursor_message(cursor) if cursor is not None else None,
        )
        answer: cloud_pb2.RecordStreamLoadedResponse = await self._call(
            self._stub.RecordStreamLoaded, request
        )
        return _outputs(answer.outputs)

    async def outputs(self, *, record_progress: bool = False) -> list[RunOutput]:
        request = cloud_pb2.ListRunOutputsRequest(
            lease=self._lease, record_progress=record_progress
        )
        answer: cloud_pb2.ListRunOutputsResponse = await self._call(
            self._stub.ListRunOutputs, request
        )
        return _outputs(answer.outputs)

    async def event(self, message: str, *, level: str = "info", stream: str = "") -> None:
        request = cloud_pb2.AddRunEventRequest(
            lease=self._lease, message=message[:2000], level=LEVELS[level], stream=stream
        )
        await self._call(self._stub.AddRunEvent, request)

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, timeout=CALL_TIMEOUT_SECONDS)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from exc


def _outputs(outputs: Iterable[cloud_pb2.RunOutput]) -> list[RunOutput]:
    return [RunOutput(o.stream, o.rows_extracted, o.rows_loaded, o.loaded) for o in outputs]
