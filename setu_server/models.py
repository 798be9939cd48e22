"""Domain records shared by the store, the services and the servicers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from uuid import UUID

# The engine's enum, re-exported: a pipeline's mode reaches the writers unconverted.
from setu_engine.kinds import RowChanges as RowChanges
from setu_engine.kinds import WriteMode as WriteMode

# How long an agent may go unseen and still count as online, with the
# default lease settings. A server derives its own from its settings
# (service.agents.presence_window, docs/jobs-and-tasks.md#agent-presence).
DEFAULT_PRESENCE_WINDOW = timedelta(seconds=45)


@dataclass(frozen=True)
class Workspace:
    id: UUID
    name: str
    created_at: datetime


@dataclass(frozen=True)
class ApiKey:
    id: UUID
    workspace_id: UUID
    name: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True)
class Agent:
    id: UUID
    workspace_id: UUID
    name: str
    active: bool
    version: str
    capabilities: list[str]
    hostname: str
    last_seen_at: datetime | None
    created_at: datetime
    # Set when it stopped gracefully (SignOff); cleared when it checks in.
    signed_off_at: datetime | None = None

    def online(
        self, now: datetime, window: timedelta = DEFAULT_PRESENCE_WINDOW, *, parked: bool = False
    ) -> bool:
        """Active, not signed off, and either holding a parked LeaseTask
        (`parked`, known to the server serving it) or seen within `window`."""
        if not self.active or self.signed_off_at is not None:
            return False
        if parked:
            return True
        return self.last_seen_at is not None and now - self.last_seen_at <= window


@dataclass(frozen=True)
class HeldTask:
    """A task an agent holds a lease on."""

    id: UUID
    job_id: UUID
    pipeline_id: UUID | None
    kind: TaskKind
    attempt: int
    lease_expires_at: datetime | None


@dataclass(frozen=True)
class AgentName:
    """An agent as people read it (service/naming.py makes the labels)."""

    id: UUID
    name: str
    # Another agent of the workspace has a name that reads the same (equal
    # ignoring case): a label adds the short id to tell them apart.
    shared: bool = False


@dataclass(frozen=True)
class AgentWork:
    """What an agent does right now: the tasks it holds, and how many wait for it."""

    running: tuple[HeldTask, ...] = ()
    queued: int = 0


class Role(StrEnum):
    CLIENT = "client"
    AGENT = "agent"
    ADMIN = "admin"
    # A cloud worker: the runtime of the `cloud` queue, across workspaces.
    WORKER = "worker"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a workspace's client, one agent, or an operator."""

    role: Role
    workspace_id: UUID | None = None
    agent_id: UUID | None = None
    credential_id: UUID | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class JobKind(StrEnum):
    RUN = "run"
    TEST = "test"
    DISCOVER = "discover"
    PREVIEW = "preview"


class JobState(StrEnum):
    READY = "ready"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_JOB_STATES


TERMINAL_JOB_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

# The job state machine (docs/jobs-and-tasks.md). Terminal states never change;
# cancel is allowed before the end.
JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.READY: frozenset({JobState.PENDING, JobState.CANCELLED}),
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def job_states_into(target: JobState) -> frozenset[JobState]:
    """The states a job may move to `target` from."""
    return frozenset(s for s, targets in JOB_TRANSITIONS.items() if target in targets)


class EventLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Phase(StrEnum):
    EXTRACT = "extract"
    LOAD = "load"
    DIRECT = "direct"


@dataclass(frozen=True)
class Job:
    id: UUID
    workspace_id: UUID
    kind: JobKind
    state: JobState
    version: int
    created_at: datetime
    updated_at: datetime
    pipeline_id: UUID | None = None
    connection_id: UUID | None = None
    # A run's snapshot of its pipeline; None for connection operations.
    params: RunSnapshot | None = None
    phase: Phase | None = None
    dry_run: bool = False
    cancel_requested: bool = False
    error_message: str = ""
    rows_extracted: int = 0
    rows_loaded: int = 0
    rows_total: int = 0
    # Over the streams whose load committed: rows the operator chain dropped,
    # and what the loaded rows did to the destination (migration 0013).
    rows_filtered: int = 0
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_unchanged: int = 0
    rows_deleted: int = 0
    # Each moving stream's (extracted, loaded) so far, from the runtimes'
    # reports; read from the job row only (a notice does not carry it).
    stream_progress: dict[str, tuple[int, int]] = field(default_factory=dict)
    extract_runtime: str = ""
    load_runtime: str = ""
    # How people read the two runtimes, filled for answers only
    # (service/naming.py): the agent's name, and a label ("agent edge-1").
    extract_agent_name: str = ""
    load_agent_name: str = ""
    extract_runtime_label: str = ""
    load_runtime_label: str = ""
    result: dict[str, Any] | None = None
    idempotency_key: str | None = None
    scheduled_for: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True)
class JobEvent:
    sequence: int
    job_id: UUID
    level: EventLevel
    stream: str
    message: str
    created_at: datetime


@dataclass(frozen=True)
class JobOutput:
    """One stream's counts in a job (the job_output table)."""

    stream: str
    rows_extracted: int
    rows_loaded: int
    checksum: str
    loaded: bool
    # What the load did to the destination's rows, where it tells.
    changes: RowChanges | None = None


@dataclass(frozen=True)
class JobFilter:
    states: frozenset[JobState] = frozenset()
    kinds: frozenset[JobKind] = frozenset()
    pipeline_id: UUID | None = None
    connection_id: UUID | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


class TaskKind(StrEnum):
    MIGRATE = "migrate"
    EXTRACT = "extract"
    LOAD = "load"
    TEST = "test"
    DISCOVER = "discover"
    PREVIEW = "preview"


class TaskState(StrEnum):
    PENDING = "pending"
    LEASED = "leased"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


CLOUD = "cloud"


def runtime_name(runtime: str) -> str:
    """How a runtime is named to people: "cloud" or "agent:<id>"."""
    return runtime if runtime == CLOUD else f"agent:{runtime}"


@dataclass(frozen=True)
class Task:
    id: UUID
    job_id: UUID
    workspace_id: UUID
    kind: TaskKind
    state: TaskState
    # "cloud", or the id of the agent whose queue holds the task.
    runtime: str
    attempt: int
    max_attempts: int
    run_after: datetime
    created_at: datetime
    updated_at: datetime
    lease_token: UUID | None = None
    lease_expires_at: datetime | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    error_message: str = ""
    finished_at: datetime | None = None
    agent_id: UUID | None = None
    # Outages handed back without spending an attempt (ReleaseTask).
    free_retries: int = 0


class Placement(StrEnum):
    """Where a connection's stage executes (docs/flows.md)."""

    CLOUD = "cloud"
    AGENT = "agent"


@dataclass(frozen=True)
class Connection:
    id: UUID
    workspace_id: UUID
    name: str
    provider: str
    # Secret references stay unresolved: {"$secret": "NAME"}.
    config: dict[str, Any]
    placement: Placement
    agent_id: UUID | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Pipeline:
    id: UUID
    workspace_id: UUID
    name: str
    source_connection_id: UUID
    destination_connection_id: UUID
    # Empty: every stream the source offers.
    streams: list[str]
    spec: dict[str, Any]
    write_mode: WriteMode
    # A five-field cron expression (UTC); "" means manual runs only.
    schedule: str
    paused: bool
    next_run_at: datetime | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Endpoint:
    """One end of a pipeline, as a run needs it."""

    id: UUID
    name: str
    provider: str
    placement: Placement
    agent_id: UUID | None


@dataclass(frozen=True)
class PipelineForRun:
    """A pipeline and its two connections at the moment a run is submitted;
    the run keeps a RunSnapshot of it (job.params) so edits do not change it."""

    id: UUID
    workspace_id: UUID
    name: str
    streams: list[str]
    spec: dict[str, Any]
    write_mode: WriteMode
    source: Endpoint
    destination: Endpoint


@dataclass(frozen=True)
class RunPlacement:
    """Where a run's two stages execute (service/placement.py decides)."""

    extract_agent: UUID | None
    load_agent: UUID | None

    @property
    def extract_runtime(self) -> str:
        return str(self.extract_agent) if self.extract_agent else CLOUD

    @property
    def load_runtime(self) -> str:
        return str(self.load_agent) if self.load_agent else CLOUD

    @property
    def flow(self) -> str:
        ends = ("agent" if agent else "cloud" for agent in (self.extract_agent, self.load_agent))
        return " → ".join(ends)

    @property
    def first_task(self) -> TaskKind:
        """The cloud's part starts with migrate, which stages (and loads, or
        hands the load to an agent); an edge source starts with extract."""
        return TaskKind.EXTRACT if self.extract_agent else TaskKind.MIGRATE

    @property
    def first_agent(self) -> UUID | None:
        """The agent of the run's first edge stage, checked online before the
        run is accepted: the extract's, else the load's (cloud → agent: the
        cloud stages, then waits on that agent; offline, the run would sit
        at load forever)."""
        return self.extract_agent or self.load_agent

    @property
    def cloud_touches_data(self) -> bool:
        return self.extract_agent is None or self.load_agent is None


@dataclass(frozen=True)
class RunSnapshot:
    """What a run moves, fixed at submit (job.params): an edit to the
    pipeline while the run goes on, or before a retry, never changes it.
    `to_json` and `from_json` are the only readers and writers of its JSON."""

    pipeline_name: str
    source_connection_id: UUID
    destination_connection_id: UUID
    # Empty: every stream the source offers.
    streams: tuple[str, ...]
    spec: dict[str, Any]
    write_mode: WriteMode
    placement: RunPlacement

    def to_json(self) -> dict[str, Any]:
        where = self.placement
        return {
            "pipeline": {
                "name": self.pipeline_name,
                "streams": list(self.streams),
                "spec": self.spec,
                "write_mode": self.write_mode.value,
                "source_connection_id": str(self.source_connection_id),
                "destination_connection_id": str(self.destination_connection_id),
            },
            # The flow is for people reading the row; the runtimes are the data.
            "placement": {
                "extract": where.extract_runtime,
                "load": where.load_runtime,
                "flow": where.flow,
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSnapshot:
        pipeline, where = data["pipeline"], data["placement"]

        def agent(runtime: str) -> UUID | None:
            return None if runtime == CLOUD else UUID(runtime)

        return cls(
            pipeline_name=str(pipeline["name"]),
            source_connection_id=UUID(pipeline["source_connection_id"]),
            destination_connection_id=UUID(pipeline["destination_connection_id"]),
            streams=tuple(str(s) for s in pipeline["streams"]),
            spec=dict(pipeline["spec"]),
            write_mode=WriteMode(pipeline["write_mode"]),
            placement=RunPlacement(agent(where["extract"]), agent(where["load"])),
        )


@dataclass(frozen=True)
class StagedRun:
    """An ended run whose staged data has outlived the retention, with every
    blob prefix its artifacts name (which of them are its own is the
    janitor's call, not the database's)."""

    id: UUID
    workspace_id: UUID
    pipeline_id: UUID | None
    prefixes: list[str]
