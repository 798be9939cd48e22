"""What the SDK hands back about jobs: plain, frozen values, not wire messages.

The enums keep the wire's numbers, so a `JobState` compares equal to the
generated constant of the same name, and print as their names
(`JobState.SUCCEEDED`), not as numbers.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format, message, struct_pb2, timestamp_pb2

from setu_client._proto.setu.v1 import agents_pb2, common_pb2, jobs_pb2

# ---------------------------------------------------------------- numbers

# Above this a double no longer holds every integer, so it stays a float.
_EXACT_INTEGERS = 2**53


def whole_numbers(value: Any) -> Any:
    """JSON-like `value` with whole floats turned back into ints.

    google.protobuf.Struct carries every number as a double, so a config's
    `port: 55432` arrives as 55432.0. Finite floats with no fraction, within
    ±2**53 (where doubles are exact), become ints, at any depth.
    """
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) <= _EXACT_INTEGERS:
            return int(value)
        return value
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def struct_to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as plain Python values, whole numbers as ints (see whole_numbers)."""
    plain: dict[str, Any] = whole_numbers(json_format.MessageToDict(struct))
    return plain


def message_to_dict(value: message.Message) -> dict[str, Any]:
    """A message (a `setu_client.messages` Connection, say) as plain JSON
    values, field names as in the .proto and whole numbers as ints."""
    plain: dict[str, Any] = whole_numbers(
        json_format.MessageToDict(
            value, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    )
    return plain


# ---------------------------------------------------------------- enums


class _WireEnum(enum.IntEnum):
    """An IntEnum that prints as `Class.NAME` (IntEnum prints the number)."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class JobState(_WireEnum):
    """Where a job is: READY → PENDING → RUNNING → SUCCEEDED | FAILED | CANCELLED."""

    UNSPECIFIED = common_pb2.JOB_STATE_UNSPECIFIED
    READY = common_pb2.JOB_STATE_READY
    PENDING = common_pb2.JOB_STATE_PENDING
    RUNNING = common_pb2.JOB_STATE_RUNNING
    SUCCEEDED = common_pb2.JOB_STATE_SUCCEEDED
    FAILED = common_pb2.JOB_STATE_FAILED
    CANCELLED = common_pb2.JOB_STATE_CANCELLED

    @property
    def terminal(self) -> bool:
        """True once the state can no longer change."""
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class JobKind(_WireEnum):
    """What a job does: a pipeline run, or an operation on one connection."""

    UNSPECIFIED = common_pb2.JOB_KIND_UNSPECIFIED
    RUN = common_pb2.JOB_KIND_RUN
    TEST = common_pb2.JOB_KIND_TEST
    DISCOVER = common_pb2.JOB_KIND_DISCOVER
    PREVIEW = common_pb2.JOB_KIND_PREVIEW


class Phase(_WireEnum):
    """Where a run is; UNSPECIFIED before it moves rows."""

    UNSPECIFIED = common_pb2.PHASE_UNSPECIFIED
    EXTRACT = common_pb2.PHASE_EXTRACT
    LOAD = common_pb2.PHASE_LOAD
    DIRECT = common_pb2.PHASE_DIRECT


class Placement(_WireEnum):
    """Where a connection's stages run: in the cloud, or on its agent."""

    UNSPECIFIED = common_pb2.PLACEMENT_UNSPECIFIED
    CLOUD = common_pb2.PLACEMENT_CLOUD
    AGENT = common_pb2.PLACEMENT_AGENT


class WriteMode(_WireEnum):
    UNSPECIFIED = common_pb2.WRITE_MODE_UNSPECIFIED
    APPEND = common_pb2.WRITE_MODE_APPEND
    OVERWRITE = common_pb2.WRITE_MODE_OVERWRITE
    UPSERT = common_pb2.WRITE_MODE_UPSERT
    MERGE = common_pb2.WRITE_MODE_MERGE


class EventLevel(_WireEnum):
    UNSPECIFIED = common_pb2.EVENT_LEVEL_UNSPECIFIED
    DEBUG = common_pb2.EVENT_LEVEL_DEBUG
    INFO = common_pb2.EVENT_LEVEL_INFO
    WARNING = common_pb2.EVENT_LEVEL_WARNING
    ERROR = common_pb2.EVENT_LEVEL_ERROR


# ---------------------------------------------------------------- values


@dataclass(frozen=True)
class Progress:
    """Row counts of a run (all zero for connection operations)."""

    rows_extracted: int = 0
    # Rows the load took, after the operator chain (while a stream loads:
    # the rows fed to it so far).
    rows_loaded: int = 0
    rows_total: int = 0
    # Over the streams whose load committed: rows the operator chain
    # dropped, and what the loaded rows did (all 0 where the destination
    # does not tell); rows a merge deleted.
    rows_filtered: int = 0
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_unchanged: int = 0
    rows_deleted: int = 0


@dataclass(frozen=True)
class Job:
    """A job as the server last reported it.

    Ids the job does not have (`pipeline_id` of a connection operation) are
    "". `extract_runtime` and `load_runtime` say where each stage ran
    ("cloud" or "agent:<id>"); `extract_agent_name` and `load_agent_name`
    name that agent, and the `*_runtime_label` fields say it as a person
    reads it ("cloud", "agent edge-1", "agent edge-1 (4f154cbd)" when two
    agents of the workspace share the name, "agent 4f154cbd (deleted)").
    `result` is the job's summary, numbers that are whole as ints.
    """

    id: str
    workspace_id: str
    kind: JobKind
    state: JobState
    version: int
    pipeline_id: str = ""
    connection_id: str = ""
    phase: Phase = Phase.UNSPECIFIED
    dry_run: bool = False
    cancel_requested: bool = False
    error_message: str = ""
    progress: Progress = field(default_factory=Progress)
    extract_runtime: str = ""
    load_runtime: str = ""
    extract_agent_name: str = ""
    load_agent_name: str = ""
    extract_runtime_label: str = ""
    load_runtime_label: str = ""
    result: Mapping[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None
    scheduled_for: datetime | None = None

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    @property
    def plan(self) -> DryRunPlan | None:
        """A dry run's plan, once it has one (its `result`); None otherwise."""
        if not self.dry_run or not self.result.get("dry_run"):
            return None
        return DryRunPlan.from_result(self.result)


@dataclass(frozen=True)
class PlannedColumn:
    """A column of a planned stream, after the pipeline's operator chain."""

    column: str
    type: str
    # The source column it carries; "" where an operator computed it.
    source: str = ""
    # The existing destination column's type; "" where the load creates it.
    destination_type: str = ""


@dataclass(frozen=True)
class SampleFault:
    """The first sampled value the real run would fail on."""

    # The column it sits in ("" where the error names none).
    column: str
    # Its row, 1-based, in the order the run reads the stream (0: not known).
    row: int
    # A short excerpt of the value.
    value: str
    # The type the column was to take ("" where none was declared).
    declared_type: str
    # The error the real run fails with.
    error: str


@dataclass(frozen=True)
class SampleCheck:
    """What a dry run checked of a stream's rows: its first `rows` (at most
    `limit`), through the operator chain and the declared column types. A
    clean sample is no promise for the rows after them."""

    rows: int
    limit: int
    # "bytes" or "time" where that bound stopped the sample short of `limit`.
    cut: str = ""
    # The first value that would not fit; None when every value fits.
    fault: SampleFault | None = None


@dataclass(frozen=True)
class PlannedStream:
    """What the run would do with one stream: where it lands, the actions on
    the destination (create schema, create table, add columns, append to the
    existing table), its columns, what a sample of its rows met, and what
    would stop it."""

    stream: str
    destination: str
    rows_estimate: int
    actions: tuple[str, ...]
    columns: tuple[PlannedColumn, ...]
    key: tuple[str, ...]
    incompatibilities: tuple[str, ...]
    # None where no sample was read (the chain does not fit the stream).
    sample: SampleCheck | None = None


@dataclass(frozen=True)
class DryRunPlan:
    """A dry run's plan (`Job.plan`): it succeeded when `incompatibilities`
    is empty, and failed listing them otherwise."""

    streams: tuple[PlannedStream, ...]

    @property
    def incompatibilities(self) -> tuple[str, ...]:
        return tuple(p for s in self.streams for p in s.incompatibilities)

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> DryRunPlan:
        return cls(tuple(_planned_stream(s) for s in result.get("streams", ())))


def _planned_stream(s: Mapping[str, Any]) -> PlannedStream:
    return PlannedStream(
        stream=str(s.get("stream", "")),
        destination=str(s.get("destination", "")),
        rows_estimate=int(s.get("rows_estimate", 0)),
        actions=tuple(s.get("actions", ())),
        columns=tuple(
            PlannedColumn(
                str(m.get("column", "")),
                str(m.get("type", "")),
                str(m.get("source", "")),
                str(m.get("destination_type", "")),
            )
            for m in s.get("mapping", ())
        ),
        key=tuple(s.get("key", ())),
        incompatibilities=tuple(s.get("incompatibilities", ())),
        sample=_sample(s.get("sample")),
    )


def _sample(s: Mapping[str, Any] | None) -> SampleCheck | None:
    if not s:
        return None
    f = s.get("fault")
    fault = (
        SampleFault(
            str(f.get("column", "")),
            int(f.get("row", 0)),
            str(f.get("value", "")),
            str(f.get("declared_type", "")),
            str(f.get("error", "")),
        )
        if f
        else None
    )
    return SampleCheck(int(s.get("rows", 0)), int(s.get("limit", 0)), str(s.get("cut", "")), fault)


@dataclass(frozen=True)
class JobOutcome:
    """What `wait_for_job` answers: the terminal state, why it failed, and
    the job's version at that moment."""

    job_id: str
    state: JobState
    error_message: str
    version: int

    @property
    def terminal(self) -> bool:
        return self.state.terminal


@dataclass(frozen=True)
class JobEvent:
    """One line of a job's timeline."""

    sequence: int
    job_id: str
    level: EventLevel
    stream: str
    message: str
    created_at: datetime | None


@dataclass(frozen=True)
class StreamOutput:
    """What a run moved for one stream."""

    stream: str
    rows_extracted: int
    rows_loaded: int
    checksum: str
    # What the load did to the destination's rows: None where the
    # destination does not tell (a file) or the stream is not loaded yet.
    # An upsert or merge leaves a row whose values are already there unchanged.
    inserted: int | None = None
    updated: int | None = None
    unchanged: int | None = None
    # Rows a merge deleted; None as the three above.
    deleted: int | None = None


@dataclass(frozen=True)
class JobOutputs:
    job_id: str
    streams: tuple[StreamOutput, ...]
    totals: Progress


@dataclass(frozen=True)
class AgentTask:
    """A task an agent holds a lease on right now. `kind` is extract, load,
    test, discover or preview; `pipeline_id` is "" for a connection operation."""

    task_id: str
    job_id: str
    kind: str
    attempt: int
    pipeline_id: str = ""
    lease_expires_at: datetime | None = None


@dataclass(frozen=True)
class Agent:
    """An agent of the workspace, its presence, and what it does now.

    `online` is the server's verdict, the one that decides whether a run
    placed on the agent is accepted: active, not signed off, and seen (a
    parked LeaseTask or any call) within the presence window.
    `signed_off_at` is set when it stopped gracefully, until it checks in
    again. `running` are the tasks it holds; `queued_tasks` wait for it.
    """

    id: str
    name: str
    online: bool
    active: bool = True
    last_seen_at: datetime | None = None
    signed_off_at: datetime | None = None
    version: str = ""
    hostname: str = ""
    capabilities: tuple[str, ...] = ()
    running: tuple[AgentTask, ...] = ()
    queued_tasks: int = 0
    created_at: datetime | None = None

    @property
    def status(self) -> str:
        """online, stopped (signed off), offline, or deactivated."""
        if not self.active:
            return "deactivated"
        if self.online:
            return "online"
        return "stopped" if self.signed_off_at is not None else "offline"


# ---------------------------------------------------------------- from the wire


def _time(message: Any, name: str) -> datetime | None:
    if not message.HasField(name):
        return None
    stamp: timestamp_pb2.Timestamp = getattr(message, name)
    return stamp.ToDatetime(tzinfo=UTC)


def _stream_output(s: jobs_pb2.StreamOutput) -> StreamOutput:
    output = StreamOutput(s.stream, s.rows_extracted, s.rows_loaded, s.checksum)
    if not s.HasField("changes"):
        return output
    c = s.changes
    return replace(
        output, inserted=c.inserted, updated=c.updated, unchanged=c.unchanged, deleted=c.deleted
    )


def _progress(p: common_pb2.Progress) -> Progress:
    return Progress(
        p.rows_extracted,
        p.rows_loaded,
        p.rows_total,
        p.rows_filtered,
        p.rows_inserted,
        p.rows_updated,
        p.rows_unchanged,
        p.rows_deleted,
    )


def job_from_message(m: common_pb2.Job) -> Job:
    return Job(
        id=m.id,
        workspace_id=m.workspace_id,
        kind=JobKind(m.kind),
        state=JobState(m.state),
        version=m.version,
        pipeline_id=m.pipeline_id,
        connection_id=m.connection_id,
        phase=Phase(m.phase),
        dry_run=m.dry_run,
        cancel_requested=m.cancel_requested,
        error_message=m.error_message,
        progress=_progress(m.progress),
        extract_runtime=m.extract_runtime,
        load_runtime=m.load_runtime,
        extract_agent_name=m.extract_agent_name,
        load_agent_name=m.load_agent_name,
        extract_runtime_label=m.extract_runtime_label,
        load_runtime_label=m.load_runtime_label,
        result=struct_to_dict(m.result),
        created_at=_time(m, "created_at"),
        started_at=_time(m, "started_at"),
        finished_at=_time(m, "finished_at"),
        updated_at=_time(m, "updated_at"),
        scheduled_for=_time(m, "scheduled_for"),
    )


def outcome_from_message(m: jobs_pb2.WaitJobResponse) -> JobOutcome:
    return JobOutcome(
        job_id=m.job_id, state=JobState(m.state), error_message=m.error_message, version=m.version
    )


def event_from_message(m: common_pb2.JobEvent) -> JobEvent:
    return JobEvent(
        sequence=m.sequence,
        job_id=m.job_id,
        level=EventLevel(m.level),
        stream=m.stream,
        message=m.message,
        created_at=_time(m, "created_at"),
    )


def _task_kind(kind: agents_pb2.TaskKind.ValueType) -> str:
    return agents_pb2.TaskKind.Name(kind).removeprefix("TASK_KIND_").lower()


def agent_from_message(m: agents_pb2.WorkspaceAgent) -> Agent:
    return Agent(
        id=m.id,
        name=m.name,
        online=m.online,
        active=m.active,
        last_seen_at=_time(m, "last_seen_at"),
        signed_off_at=_time(m, "signed_off_at"),
        version=m.version,
        hostname=m.hostname,
        capabilities=tuple(m.capabilities),
        running=tuple(
            AgentTask(
                task_id=t.task_id,
                job_id=t.job_id,
                kind=_task_kind(t.kind),
                attempt=t.attempt,
                pipeline_id=t.pipeline_id,
                lease_expires_at=_time(t, "lease_expires_at"),
            )
            for t in m.running
        ),
        queued_tasks=m.queued_tasks,
        created_at=_time(m, "created_at"),
    )


def outputs_from_message(m: jobs_pb2.GetJobOutputsResponse) -> JobOutputs:
    return JobOutputs(
        job_id=m.job_id,
        streams=tuple(_stream_output(s) for s in m.streams),
        totals=_progress(m.totals),
    )
