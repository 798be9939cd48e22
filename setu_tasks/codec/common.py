"""The messages both gRPC edges carry (common.proto, and the agents.proto
pieces cloud.proto reuses), each with both directions: `X_message` writes the
message, `X_of` reads it back."""

from __future__ import annotations

from collections.abc import Iterable

from setu_client import struct_to_dict
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import common_pb2
from setu_client.errors import InvalidArgument
from setu_engine.errors import BlobError, SqlTypeError
from setu_engine.kinds import RowChanges, WriteMode
from setu_engine.planning.incremental import MARK_TYPES
from setu_engine.planning.plans import PlannedColumn, PlannedStream, SampleCheck, SampleFault
from setu_engine.staged.blob import BlobSettings, check_key
from setu_engine.staged.staging import Part, StoredPart
from setu_engine.values import sqltypes
from setu_engine.values.strict_json import MalformedResult
from setu_engine.values.types import Column, Stream
from setu_engine.values.window import CursorMark
from setu_tasks.results import Artifact, ArtifactStream
from setu_tasks.specs import ConnectionSpec

# A write mode's wire number, and back (an unset one is an append).
WRITE_MODE_NUMBERS = {m: getattr(common_pb2, f"WRITE_MODE_{m.name}") for m in WriteMode}
WRITE_MODES = {v: k for k, v in WRITE_MODE_NUMBERS.items()} | {
    common_pb2.WRITE_MODE_UNSPECIFIED: WriteMode.APPEND
}

# The longest cursor column or value a runtime may report.
MAX_TEXT = 1000


# -- columns and streams


def column_message(column: Column) -> common_pb2.Column:
    return common_pb2.Column(
        name=column.name, type=column.type, nullable=column.nullable, sql_type=column.sql_type
    )


def column_of(column: common_pb2.Column) -> Column:
    try:
        sql_type = sqltypes.canonical(column.sql_type)
    except SqlTypeError as exc:
        raise MalformedResult(f"column {column.name}: {exc}") from None
    return Column(column.name, column.type, column.nullable, sql_type)


def catalog_stream_message(stream: Stream) -> common_pb2.CatalogStream:
    return common_pb2.CatalogStream(
        namespace=stream.namespace,
        name=stream.name,
        columns=[column_message(c) for c in stream.columns],
        primary_key=stream.primary_key,
        row_estimate=stream.row_estimate,
    )


def catalog_stream_of(s: common_pb2.CatalogStream) -> Stream:
    return Stream(
        name=s.name,
        columns=tuple(column_of(c) for c in s.columns),
        namespace=s.namespace,
        primary_key=tuple(s.primary_key),
        row_estimate=s.row_estimate,
    )


# -- what a load did, and where an incremental stream stands


def changes_message(changes: RowChanges) -> common_pb2.RowChanges:
    return common_pb2.RowChanges(
        inserted=changes.inserted,
        updated=changes.updated,
        unchanged=changes.unchanged,
        deleted=changes.deleted,
    )


def changes_of(message: common_pb2.RowChanges) -> RowChanges:
    return RowChanges(message.inserted, message.updated, message.unchanged, message.deleted)


def cursor_message(mark: CursorMark) -> common_pb2.StreamCursor:
    return common_pb2.StreamCursor(column=mark.column, type=mark.type, value=mark.value)


def cursor_of(message: common_pb2.StreamCursor, name: str = "cursor") -> CursorMark:
    """A cursor checked as a servicer checks any field."""
    for field in ("column", "value"):
        text = getattr(message, field)
        if not text or len(text) > MAX_TEXT:
            raise InvalidArgument(f"{name}.{field}: required, at most {MAX_TEXT} characters")
    if message.type not in MARK_TYPES:
        raise InvalidArgument(
            f"{name}.type: one of {', '.join(sorted(MARK_TYPES))}, not {message.type[:60]!r}"
        )
    return CursorMark(message.column, message.type, message.value)


# -- what an extract staged, and a dry run's plan


def artifact_message(artifact: Artifact) -> pb.Artifact:
    return pb.Artifact(
        blob_prefix=artifact.blob_prefix,
        manifest_path=artifact.manifest_path,
        streams=[
            pb.StagedStream(stream=s.stream, rows=s.rows, parts=s.parts, checksum=s.checksum)
            for s in artifact.streams
        ],
    )


def artifact_of(message: pb.Artifact) -> Artifact:
    streams = tuple(
        ArtifactStream(s.stream, s.rows, tuple(s.parts), s.checksum) for s in message.streams
    )
    return Artifact(message.blob_prefix, streams, message.manifest_path)


def planned_message(p: PlannedStream) -> pb.PlannedStream:
    return pb.PlannedStream(
        stream=p.stream,
        destination=p.destination,
        rows_estimate=p.rows_estimate,
        columns=[column_message(c) for c in p.columns],
        key=p.key,
        schema=p.schema,
        table=p.table,
        actions=p.actions,
        incompatibilities=p.incompatibilities,
        mapping=[
            pb.PlannedColumn(
                column=m.column, type=m.type, source=m.source, destination_type=m.destination_type
            )
            for m in p.mapping
        ],
        sample=None if p.sample is None else sample_message(p.sample),
    )


def sample_message(check: SampleCheck) -> pb.SampleCheck:
    fault = check.fault
    return pb.SampleCheck(
        rows=check.rows,
        limit=check.limit,
        cut=check.cut,
        fault=None
        if fault is None
        else pb.SampleFault(
            column=fault.column,
            row=fault.row,
            value=fault.value,
            declared_type=fault.declared_type,
            error=fault.error,
        ),
    )


def sample_of(m: pb.SampleCheck) -> SampleCheck:
    f = m.fault
    fault = (
        SampleFault(f.column, f.row, f.value, f.declared_type, f.error)
        if m.HasField("fault")
        else None
    )
    return SampleCheck(m.rows, m.limit, m.cut, fault)


def planned_of(p: pb.PlannedStream) -> PlannedStream:
    return PlannedStream(
        p.stream,
        p.destination,
        p.rows_estimate,
        tuple(column_of(c) for c in p.columns),
        tuple(p.key),
        p.schema,
        p.table,
        tuple(p.actions),
        tuple(p.incompatibilities),
        tuple(PlannedColumn(m.column, m.type, m.source, m.destination_type) for m in p.mapping),
        sample_of(p.sample) if p.HasField("sample") else None,
    )


# -- the parts an extract stored (the run's books)


def stored_part_message(stored: StoredPart) -> pb.StoredPart:
    part = stored.part
    return pb.StoredPart(
        stream_index=stored.stream_index,
        stream=stored.stream,
        number=stored.number,
        path=part.path,
        rows=part.rows,
        bytes=part.size,
        sha256=part.sha256,
        position=stored.position,
    )


def stored_part_of(message: pb.StoredPart) -> StoredPart:
    part = Part(message.path, message.rows, message.bytes, message.sha256)
    return StoredPart(message.stream_index, message.stream, message.number, part, message.position)


def stored_parts_of(messages: Iterable[pb.StoredPart], field: str) -> list[StoredPart]:
    """The parts a runtime says it stored, as the run's books keep them; a
    path that would leave the run's blob prefix (absolute, `..`, empty or
    backslashed segments) is refused, naming the field, before anything is
    recorded."""
    parts = []
    for index, message in enumerate(messages):
        try:
            check_key(message.path)
        except BlobError as exc:
            raise InvalidArgument(f"{field}[{index}].path: {exc}") from exc
        parts.append(stored_part_of(message))
    return parts


# -- each stream's counts while it moves

# The most streams one progress report may carry.
MAX_STREAMS = 1000


def stream_progress_message(
    streams: dict[str, tuple[int, int]],
) -> list[common_pb2.StreamProgress]:
    return [
        common_pb2.StreamProgress(stream=name, rows_extracted=e, rows_loaded=w)
        for name, (e, w) in streams.items()
    ]


def stream_progress_of(
    messages: Iterable[common_pb2.StreamProgress], field: str
) -> dict[str, tuple[int, int]]:
    """Each stream's (extracted, loaded) as a runtime reports them; a name
    too long, a count below 0 or more than MAX_STREAMS streams is refused,
    naming the field."""
    streams: dict[str, tuple[int, int]] = {}
    for index, m in enumerate(messages):
        if index >= MAX_STREAMS:
            raise InvalidArgument(f"{field}: more than {MAX_STREAMS} streams")
        if not m.stream or len(m.stream) > MAX_TEXT:
            raise InvalidArgument(f"{field}[{index}].stream: 1 to {MAX_TEXT} characters")
        if m.rows_extracted < 0 or m.rows_loaded < 0:
            raise InvalidArgument(f"{field}[{index}]: a count below 0")
        streams[m.stream] = (m.rows_extracted, m.rows_loaded)
    return streams


# -- where a stage reads and writes


def connection_message(spec: ConnectionSpec) -> pb.ConnectionSpec:
    message = pb.ConnectionSpec(connection_id=spec.connection_id, provider=spec.provider)
    message.config.update(spec.config)
    return message


def connection_of(spec: pb.ConnectionSpec) -> ConnectionSpec:
    # Whole numbers (a port) come back as ints, as the connection was created.
    return ConnectionSpec(spec.connection_id, spec.provider, struct_to_dict(spec.config))


def blob_message(blob: BlobSettings) -> pb.BlobSettings:
    return pb.BlobSettings(
        backend=blob.backend, root=blob.root, endpoint_url=blob.endpoint_url, region=blob.region
    )


def blob_of(blob: pb.BlobSettings) -> BlobSettings:
    return BlobSettings(blob.backend, blob.root, blob.endpoint_url, blob.region)
