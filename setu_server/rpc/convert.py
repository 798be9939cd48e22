"""Domain records to protos and back. Only servicers use this."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from google.protobuf import struct_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from setu_client import struct_to_dict
from setu_client._proto.setu.v1 import admin_pb2, common_pb2
from setu_client.errors import InvalidArgument
from setu_server.models import (
    Agent,
    ApiKey,
    EventLevel,
    Job,
    JobEvent,
    JobFilter,
    JobKind,
    JobState,
    Phase,
    Workspace,
    WriteMode,
)

JOB_KINDS = {k: getattr(common_pb2, f"JOB_KIND_{k.name}") for k in JobKind}
JOB_STATES = {s: getattr(common_pb2, f"JOB_STATE_{s.name}") for s in JobState}
PHASES = {p: getattr(common_pb2, f"PHASE_{p.name}") for p in Phase}
LEVELS = {lv: getattr(common_pb2, f"EVENT_LEVEL_{lv.name}") for lv in EventLevel}
WRITE_MODES = {m: getattr(common_pb2, f"WRITE_MODE_{m.name}") for m in WriteMode}
JOB_STATES_BACK = {v: k for k, v in JOB_STATES.items()}
JOB_KINDS_BACK = {v: k for k, v in JOB_KINDS.items()}


def ts(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def uid(value: str) -> UUID:
    """An id the validator already checked."""
    return UUID(value)


def workspace(w: Workspace) -> admin_pb2.Workspace:
    return admin_pb2.Workspace(id=str(w.id), name=w.name, created_at=ts(w.created_at))


def api_key(k: ApiKey) -> admin_pb2.ApiKey:
    return admin_pb2.ApiKey(
        id=str(k.id),
        workspace_id=str(k.workspace_id),
        name=k.name,
        prefix=k.prefix,
        created_at=ts(k.created_at),
        revoked_at=ts(k.revoked_at),
    )


def agent(a: Agent, online: bool) -> admin_pb2.Agent:
    """`online` as AgentPresence.online judges it (it knows the window)."""
    return admin_pb2.Agent(
        id=str(a.id),
        workspace_id=str(a.workspace_id),
        name=a.name,
        active=a.active,
        online=online,
        version=a.version,
        capabilities=a.capabilities,
        hostname=a.hostname,
        last_seen_at=ts(a.last_seen_at),
        created_at=ts(a.created_at),
    )


def _id(value: UUID | None) -> str:
    return str(value) if value else ""


def progress_message(j: Job) -> common_pb2.Progress:
    return common_pb2.Progress(
        rows_extracted=j.rows_extracted,
        rows_loaded=j.rows_loaded,
        rows_total=j.rows_total,
        rows_filtered=j.rows_filtered,
        rows_inserted=j.rows_inserted,
        rows_updated=j.rows_updated,
        rows_unchanged=j.rows_unchanged,
        rows_deleted=j.rows_deleted,
    )


def job(j: Job) -> common_pb2.Job:
    message = common_pb2.Job(
        id=str(j.id),
        workspace_id=str(j.workspace_id),
        kind=JOB_KINDS[j.kind],
        state=JOB_STATES[j.state],
        version=j.version,
        pipeline_id=_id(j.pipeline_id),
        connection_id=_id(j.connection_id),
        phase=PHASES[j.phase] if j.phase else common_pb2.PHASE_UNSPECIFIED,
        dry_run=j.dry_run,
        cancel_requested=j.cancel_requested,
        error_message=j.error_message,
        progress=progress_message(j),
        extract_runtime=j.extract_runtime,
        load_runtime=j.load_runtime,
        extract_agent_name=j.extract_agent_name,
        load_agent_name=j.load_agent_name,
        extract_runtime_label=j.extract_runtime_label,
        load_runtime_label=j.load_runtime_label,
        created_at=ts(j.created_at),
        started_at=ts(j.started_at),
        finished_at=ts(j.finished_at),
        updated_at=ts(j.updated_at),
        scheduled_for=ts(j.scheduled_for),
    )
    if j.result is not None:
        message.result.update(j.result)
    return message


def job_event(e: JobEvent) -> common_pb2.JobEvent:
    return common_pb2.JobEvent(
        sequence=e.sequence,
        job_id=str(e.job_id),
        level=LEVELS[e.level],
        stream=e.stream,
        message=e.message,
        created_at=ts(e.created_at),
    )


def _optional_ts(message: Any, field: str) -> datetime | None:
    if not message.HasField(field):
        return None
    value: datetime = getattr(message, field).ToDatetime(tzinfo=UTC)
    return value


def job_filter(request: Any) -> JobFilter:
    """ListJobsRequest's filters; UNSPECIFIED enum values are rejected."""
    try:
        states = frozenset(JOB_STATES_BACK[s] for s in request.states)
        kinds = frozenset(JOB_KINDS_BACK[k] for k in request.kinds)
    except KeyError:
        raise InvalidArgument("states/kinds: UNSPECIFIED or unknown values cannot filter") from None
    return JobFilter(
        states=states,
        kinds=kinds,
        pipeline_id=UUID(request.pipeline_id) if request.pipeline_id else None,
        connection_id=UUID(request.connection_id) if request.connection_id else None,
        created_after=_optional_ts(request, "created_after"),
        created_before=_optional_ts(request, "created_before"),
    )


def optional_uid(value: str, field: str) -> UUID | None:
    """An optional id the interceptor did not check (it sits in a message
    that is also a response)."""
    if not value:
        return None
    try:
        return UUID(value)
    except ValueError:
        raise InvalidArgument(f"{field}: must be a UUID, got {value[:40]!r}") from None


def struct_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as plain JSON values. Struct numbers are all doubles, so
    whole ones come back as ints (a port is 5432, not 5432.0), by the same
    rule the SDK applies to what it receives."""
    return struct_to_dict(struct)
