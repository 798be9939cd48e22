"""AgentService's messages (agents.proto), both directions: the task a
runtime leases, the typed result it reports (the CompleteTaskRequest oneof),
the specs of the extract and load it runs, and the stored parts a heartbeat
carries. A result kind has one writer and one reader here, keyed by its kind,
which is also its field in the oneof."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from setu_client import struct_to_dict
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_engine.staged.staging import StoredPart
from setu_engine.values.strict_json import MalformedResult
from setu_tasks.codec.common import (
    WRITE_MODE_NUMBERS,
    WRITE_MODES,
    artifact_message,
    artifact_of,
    blob_message,
    blob_of,
    catalog_stream_message,
    catalog_stream_of,
    changes_message,
    changes_of,
    column_message,
    column_of,
    connection_message,
    connection_of,
    cursor_message,
    cursor_of,
    planned_message,
    planned_of,
    sample_message,
    sample_of,
    stored_part_message,
    stored_part_of,
)
from setu_tasks.results import (
    DiscoverResult,
    ExtractResult,
    LoadResult,
    MigrateMode,
    MigrateResult,
    PreviewResult,
    StreamCounts,
    TaskResult,
    TestResult,
)
from setu_tasks.specs import ExtractSpec, LeasedTask, LoadSpec

KIND_NAMES = {v: k.removeprefix("TASK_KIND_").lower() for k, v in pb.TaskKind.items()}


def leased_task(task: pb.Task) -> LeasedTask:
    return LeasedTask(
        id=task.id,
        job_id=task.job_id,
        kind=KIND_NAMES.get(task.kind, "unspecified"),
        attempt=task.attempt,
        max_attempts=task.max_attempts,
        lease_token=task.lease_token,
        payload=MessageToDict(task.payload),
        free_retries=task.free_retries,
    )


def stored_part_progress(stored: StoredPart) -> dict[str, Any]:
    """A stored part as a heartbeat's progress carries it (TaskProgress)."""
    return MessageToDict(stored_part_message(stored), preserving_proto_field_name=True)


# -- the specs a runtime asks for (GetExtractSpec, GetLoadSpec)


def extract_spec_message(spec: ExtractSpec) -> pb.ExtractSpec:
    message = pb.ExtractSpec(
        job_id=spec.job_id,
        pipeline_id=spec.pipeline_id,
        source=connection_message(spec.source),
        streams=spec.streams,
        blob_prefix=spec.blob_prefix,
        blob=blob_message(spec.blob),
        write_mode=WRITE_MODE_NUMBERS[spec.write_mode],
        cursors=spec.cursors,
        stored_parts=[stored_part_message(p) for p in spec.stored_parts],
    )
    message.spec.update(spec.spec)
    return message


def extract_spec_of(spec: pb.ExtractSpec) -> ExtractSpec:
    return ExtractSpec(
        job_id=spec.job_id,
        pipeline_id=spec.pipeline_id,
        source=connection_of(spec.source),
        streams=list(spec.streams),
        blob_prefix=spec.blob_prefix,
        blob=blob_of(spec.blob),
        spec=struct_to_dict(spec.spec),
        write_mode=WRITE_MODES[spec.write_mode],
        cursors=dict(spec.cursors),
        stored_parts=[stored_part_of(p) for p in spec.stored_parts],
    )


def load_spec_message(spec: LoadSpec) -> pb.LoadSpec:
    message = pb.LoadSpec(
        job_id=spec.job_id,
        pipeline_id=spec.pipeline_id,
        destination=connection_message(spec.destination),
        write_mode=WRITE_MODE_NUMBERS[spec.write_mode],
        artifact=pb.Artifact(
            blob_prefix=spec.blob_prefix,
            manifest_path=spec.manifest_path,
            streams=[pb.StagedStream(stream=s) for s in spec.streams],
        ),
        blob=blob_message(spec.blob),
    )
    message.spec.update(spec.spec)
    return message


def load_spec_of(spec: pb.LoadSpec) -> LoadSpec:
    return LoadSpec(
        job_id=spec.job_id,
        pipeline_id=spec.pipeline_id,
        destination=connection_of(spec.destination),
        write_mode=WRITE_MODES[spec.write_mode],
        spec=struct_to_dict(spec.spec),  # whole numbers as ints (mask keep: 4)
        blob_prefix=spec.artifact.blob_prefix,
        blob=blob_of(spec.blob),
        manifest_path=spec.artifact.manifest_path,
        streams=[s.stream for s in spec.artifact.streams],
    )


# -- a typed result as the CompleteTaskRequest oneof, and back


def completion(task: LeasedTask, result: TaskResult) -> pb.CompleteTaskRequest:
    request = pb.CompleteTaskRequest(task_id=task.id, lease_token=task.lease_token)
    write = RESULT_WRITERS.get(result.kind)
    if write is None:
        raise MalformedResult(f"a {result.kind} result is not reported over gRPC")
    getattr(request, result.kind).CopyFrom(write(result))
    return request


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


def _notes(notes: tuple[tuple[str, str], ...]) -> list[pb.LoadNote]:
    return [pb.LoadNote(stream=s, message=m) for s, m in notes]


def _notes_of(notes: Any) -> tuple[tuple[str, str], ...]:
    return tuple((n.stream, n.message) for n in notes)


def _extract_message(result: ExtractResult) -> pb.ExtractResult:
    return pb.ExtractResult(
        artifact=artifact_message(result.artifact),
        rows_extracted=result.rows_extracted,
        notes=_notes(result.notes),
    )


def _extract_result(message: pb.ExtractResult) -> ExtractResult:
    # An absent artifact reads as an empty one, which ExtractResult.validate refuses.
    return ExtractResult(
        artifact_of(message.artifact), message.rows_extracted, _notes_of(message.notes)
    )


def _load_message(result: LoadResult) -> pb.LoadResult:
    return pb.LoadResult(
        rows_loaded=result.rows_loaded,
        rows_by_stream=result.rows_by_stream,
        changes_by_stream={s: changes_message(c) for s, c in result.changes_by_stream.items()},
        dry_run=result.dry_run,
        planned=[planned_message(p) for p in result.planned],
        notes=_notes(result.notes),
        cursors_by_stream={s: cursor_message(c) for s, c in result.cursors_by_stream.items()},
    )


def _load_result(message: pb.LoadResult) -> LoadResult:
    changes = {s: changes_of(c) for s, c in message.changes_by_stream.items()}
    return LoadResult(
        message.rows_loaded,
        dict(message.rows_by_stream),
        changes,
        dry_run=message.dry_run,
        planned=tuple(planned_of(p) for p in message.planned),
        notes=_notes_of(message.notes),
        cursors_by_stream={
            s: cursor_of(c, f"load.cursors_by_stream[{s!r}]")
            for s, c in message.cursors_by_stream.items()
        },
    )


def _test_message(result: TestResult) -> pb.TestResult:
    return pb.TestResult(ok=result.ok, message=result.message)


def _test_result(message: pb.TestResult) -> TestResult:
    return TestResult(message.ok, message.message)


def _discover_message(result: DiscoverResult) -> pb.DiscoverResult:
    return pb.DiscoverResult(
        streams=[catalog_stream_message(s) for s in result.streams],
        samples={name: sample_message(c) for name, c in result.samples.items()},
    )


def _discover_result(message: pb.DiscoverResult) -> DiscoverResult:
    return DiscoverResult(
        tuple(catalog_stream_of(s) for s in message.streams),
        {name: sample_of(c) for name, c in message.samples.items()},
    )


def _preview_message(result: PreviewResult) -> pb.PreviewResult:
    message = pb.PreviewResult(columns=[column_message(c) for c in result.columns])
    for row in result.rows:
        message.rows.add().update(row)
    return message


def _preview_result(message: pb.PreviewResult) -> PreviewResult:
    return PreviewResult(
        columns=tuple(column_of(c) for c in message.columns),
        rows=tuple(MessageToDict(row) for row in message.rows),
    )


def _migrate_message(result: MigrateResult) -> pb.MigrateResult:
    return pb.MigrateResult(
        mode=result.mode.value,
        rows_extracted=result.rows_extracted,
        rows_loaded=result.rows_loaded,
        streams=[
            pb.StreamCounts(
                stream=s.stream, rows_extracted=s.rows_extracted, rows_loaded=s.rows_loaded
            )
            for s in result.streams
        ],
        planned=[planned_message(p) for p in result.planned],
        reason=result.reason,
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


# Each kind's entries, by its kind (its field in the CompleteTaskRequest oneof).
RESULT_WRITERS: dict[str, Callable[[Any], Message]] = {
    "migrate": _migrate_message,
    "extract": _extract_message,
    "load": _load_message,
    "test": _test_message,
    "discover": _discover_message,
    "preview": _preview_message,
}
RESULT_READERS: dict[str, Callable[[Any], TaskResult]] = {
    "migrate": _migrate_result,
    "extract": _extract_result,
    "load": _load_result,
    "test": _test_result,
    "discover": _discover_result,
    "preview": _preview_result,
}
