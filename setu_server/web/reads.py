"""What the pages show, read through the service layer and shaped for the
templates. Everything here is scoped to the signed-in workspace by the
services themselves: a job id of another workspace is JobNotFound here too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any
from uuid import UUID

from setu_server.models import (
    Agent,
    Connection,
    Job,
    JobEvent,
    JobFilter,
    JobKind,
    JobOutput,
    JobState,
    Phase,
    Pipeline,
    Placement,
)
from setu_server.service.naming import RuntimeNames, runtime_agent
from setu_server.web.deps import MonitorDeps
from setu_tasks.results import TestResult

# How many of each thing a page names at most (pickers, name look-ups).
NAMES_LIMIT = 500
RUNS_PAGE = 25
EVENTS_PAGE = 1000
ACTIVE = frozenset({JobState.PENDING, JobState.RUNNING})
# The runs list shows runs; `?kind=ops` shows the connection operations apart.
RUNS = frozenset({JobKind.RUN})
OPERATIONS = frozenset(JobKind) - RUNS
# Keys whose plain (unreferenced) values a page never shows.
SENSITIVE_KEYS = ("password", "secret", "token", "key", "credential")


@dataclass(frozen=True)
class Names:
    """Ids as people know them: pipelines, connections and agents by name."""

    pipelines: dict[UUID, Pipeline] = field(default_factory=dict)
    connections: dict[UUID, Connection] = field(default_factory=dict)
    agents: dict[UUID, Agent] = field(default_factory=dict)

    @cached_property
    def runtimes(self) -> RuntimeNames:
        return RuntimeNames.of(self.agents.values())

    def runtime(self, runtime: str) -> str:
        """ "cloud", "agent edge-1" (with the short id when the name is
        shared, service/naming.py), or "—" before the stage has a place."""
        return self.runtimes.label(runtime) or "—"

    def agent(self, agent: Agent) -> str:
        """An agent's name, with its short id when another shares it."""
        return self.runtimes.agent_label(agent.id).removeprefix("agent ")

    def pipeline(self, job: Job) -> str:
        if job.params is not None:
            return job.params.pipeline_name
        if job.connection_id is not None:
            found = self.connections.get(job.connection_id)
            return f"{job.kind.value} of {found.name if found else job.connection_id}"
        return job.kind.value

    def connection(self, connection_id: UUID) -> str:
        found = self.connections.get(connection_id)
        return found.name if found else str(connection_id)

    def placement(self, connection: Connection) -> str:
        if connection.placement is Placement.AGENT and connection.agent_id is not None:
            return self.runtime(str(connection.agent_id))
        return "cloud"


async def names(deps: MonitorDeps, workspace_id: UUID) -> Names:
    pipelines, _ = await deps.pipelines.list_pipelines(workspace_id, NAMES_LIMIT, "")
    connections, _ = await deps.connections.list_connections(workspace_id, "", NAMES_LIMIT, "")
    agents = await deps.admin.list_agents(workspace_id)
    return Names(
        {p.id: p for p in pipelines},
        {c.id: c for c in connections},
        {a.id: a for a in agents},
    )


@dataclass(frozen=True)
class RunRow:
    """One job as the runs list shows it."""

    job: Job
    what: str
    extract: str
    load: str
    duration: timedelta | None


def run_row(job: Job, known: Names, now: datetime) -> RunRow:
    extract, load = stage_runtimes(job)
    # A connection operation runs where its connection is placed.
    on = known.connections.get(job.connection_id) if job.connection_id else None
    return RunRow(
        job=job,
        what=known.pipeline(job),
        extract=known.placement(on) if on and not extract else known.runtime(extract),
        load=known.runtime(load),
        duration=run_duration(job, now),
    )


def stage_runtimes(job: Job) -> tuple[str, str]:
    """Where each stage ran, or, before it ran, where the run placed it."""
    extract, load = job.extract_runtime, job.load_runtime
    if job.params is not None:
        extract = extract or job.params.placement.extract_runtime
        load = load or job.params.placement.load_runtime
    return extract, load


def run_duration(job: Job, now: datetime) -> timedelta | None:
    if job.started_at is None:
        return None
    return (job.finished_at or now) - job.started_at


def job_filter(state: str, pipeline: str, kind: str = "", connection: str = "") -> JobFilter:
    """The runs list's filter from its query string: runs, or with kind
    "ops" the connection operations (tests, discovers, previews); unknown
    values filter nothing."""
    try:
        states = frozenset({JobState(state)}) if state else frozenset()
    except ValueError:
        states = frozenset()
    if kind == "ops":  # an operation has no pipeline
        connection_id = _uuid(connection) if connection else None
        return JobFilter(states=states, kinds=OPERATIONS, connection_id=connection_id)
    return JobFilter(states=states, kinds=RUNS, pipeline_id=_uuid(pipeline) if pipeline else None)


async def run_rows(
    deps: MonitorDeps, workspace_id: UUID, where: JobFilter, page_token: str, known: Names
) -> tuple[list[RunRow], str]:
    jobs, next_token = await deps.jobs.list_jobs(workspace_id, where, RUNS_PAGE, page_token)
    now = deps.clock.now()
    return [run_row(job, known, now) for job in jobs], next_token


# The middle of a run's placement picture, by phase.
RELAY = {
    None: "not started",
    Phase.EXTRACT: "blob (staged)",
    Phase.LOAD: "blob (staged)",
    Phase.DIRECT: "direct, no staging",
}


@dataclass(frozen=True)
class RunView:
    """A run page: the job, where it runs, its streams, its timeline."""

    job: Job
    what: str
    source: str
    destination: str
    extract: str
    load: str
    relay: str
    outputs: list[JobOutput]
    events: list[JobEvent]
    duration: timedelta | None
    rate: float | None
    # Rows per second of each stream that moved, over the run's time so far.
    stream_rates: dict[str, float] = field(default_factory=dict)

    @property
    def last_sequence(self) -> int:
        return self.events[-1].sequence if self.events else 0


async def run_view(
    deps: MonitorDeps, workspace_id: UUID, job_id: UUID, known: Names, after: int = 0
) -> RunView:
    job, outputs = await deps.jobs.outputs(workspace_id, job_id)
    events, _ = await deps.jobs.events(workspace_id, job_id, after, EVENTS_PAGE, "")
    return view_of(job, outputs, events, known, deps.clock.now())


def view_of(
    job: Job, outputs: list[JobOutput], events: list[JobEvent], known: Names, now: datetime
) -> RunView:
    snapshot = job.params
    source = destination = ""
    extract, load = stage_runtimes(job)
    if snapshot is not None:
        source = known.connection(snapshot.source_connection_id)
        destination = known.connection(snapshot.destination_connection_id)
    elif job.connection_id is not None:
        source = known.connection(job.connection_id)
    took = run_duration(job, now)
    seconds = took.total_seconds() if took else 0.0
    return RunView(
        job=job,
        what=known.pipeline(job),
        source=source,
        destination=destination,
        extract=known.runtime(extract),
        load=known.runtime(load),
        relay=RELAY[job.phase],
        outputs=outputs,
        events=events,
        duration=took,
        rate=job.rows_loaded / seconds if seconds > 0 and job.rows_loaded else None,
        stream_rates=stream_rates(outputs, seconds),
    )


def stream_rates(outputs: Sequence[JobOutput], seconds: float) -> dict[str, float]:
    """Each stream's rows per second over `seconds` of run: its loaded rows
    once its load committed, its extracted rows until then."""
    if seconds <= 0:
        return {}
    moved = {out.stream: out.rows_loaded if out.loaded else out.rows_extracted for out in outputs}
    return {stream: rows / seconds for stream, rows in moved.items() if rows}


@dataclass(frozen=True)
class PipelineRow:
    pipeline: Pipeline
    source: str
    destination: str
    last: Job | None


async def pipeline_rows(deps: MonitorDeps, workspace_id: UUID, known: Names) -> list[PipelineRow]:
    rows = []
    for pipeline in known.pipelines.values():
        where = JobFilter(kinds=frozenset({JobKind.RUN}), pipeline_id=pipeline.id)
        last, _ = await deps.jobs.list_jobs(workspace_id, where, 1, "")
        rows.append(
            PipelineRow(
                pipeline,
                known.connection(pipeline.source_connection_id),
                known.connection(pipeline.destination_connection_id),
                last[0] if last else None,
            )
        )
    return sorted(rows, key=lambda row: row.pipeline.name)


@dataclass(frozen=True)
class ConnectionRow:
    connection: Connection
    placement: str
    config: list[tuple[str, str, bool]]
    catalog: list[dict[str, Any]]
    discovered: Job | None


async def connection_rows(
    deps: MonitorDeps, workspace_id: UUID, known: Names
) -> list[ConnectionRow]:
    rows = []
    for connection in sorted(known.connections.values(), key=lambda c: c.name):
        where = JobFilter(
            states=frozenset({JobState.SUCCEEDED}),
            kinds=frozenset({JobKind.DISCOVER}),
            connection_id=connection.id,
        )
        found, _ = await deps.jobs.list_jobs(workspace_id, where, 1, "")
        discovered = found[0] if found else None
        streams = (discovered.result or {}).get("streams", []) if discovered else []
        rows.append(
            ConnectionRow(
                connection,
                known.placement(connection),
                shown_config(connection.config, provider=connection.provider),
                [s for s in streams if isinstance(s, dict)],
                discovered,
            )
        )
    return rows


def shown_config(
    config: dict[str, Any], prefix: str = "", provider: str = ""
) -> list[tuple[str, str, bool]]:
    """(key, value, is a reference) lines: secret references as their names,
    never a value; a plain value under a secret-sounding key is masked; a
    switch (true/false) in words."""
    lines: list[tuple[str, str, bool]] = []
    for key, value in sorted(config.items()):
        path = f"{prefix}{key}"
        if isinstance(value, dict) and set(value) == {"$secret"}:
            lines.append((path, f"secret {value['$secret']}", True))
        elif isinstance(value, dict):
            lines.extend(shown_config(value, path + ".", provider))
        elif any(word in key.lower() for word in SENSITIVE_KEYS):
            lines.append((path, "•••• (a plain value: use a secret reference)", False))
        else:
            lines.append((path, shown_value(provider, path, value), False))
    return lines


# What a provider's switches mean (README.md's table of config keys).
SWITCHES: dict[tuple[str, str], dict[bool, str]] = {
    ("sqlite", "create"): {
        True: "yes: opened for writing; the file is made when missing",
        False: "no: opened read-only",
    },
    ("file", "csv.header"): {
        True: "yes: the first line names the columns",
        False: "no: the columns are c1, c2, … or column_names",
    },
}


def shown_value(provider: str, path: str, value: Any) -> str:
    """A config value as a person reads it: a switch in words, else as given."""
    if isinstance(value, bool):
        return SWITCHES.get((provider, path), {}).get(value) or ("yes" if value else "no")
    return str(value)


@dataclass(frozen=True)
class TestOutcome:
    __test__ = False  # not a pytest class, despite its name
    connection_id: UUID
    ok: bool
    message: str


async def test_outcome(deps: MonitorDeps, workspace_id: UUID, job_id: UUID) -> TestOutcome | None:
    """What a connection test (a job of this workspace) answered."""
    job = await deps.jobs.get(workspace_id, job_id)
    if job.kind is not JobKind.TEST or job.connection_id is None or not job.state.terminal:
        return None
    if job.state is JobState.SUCCEEDED or (job.result or {}).get("kind") == "test":
        tested = TestResult.from_json(job.result)
        return TestOutcome(job.connection_id, tested.ok, tested.message)
    return TestOutcome(job.connection_id, False, job.error_message)


@dataclass(frozen=True)
class AgentRow:
    agent: Agent
    online: bool
    running: list[RunRow]
    # Its name, with the short id when another agent's name reads the same.
    name: str = ""


async def agent_rows(deps: MonitorDeps, workspace_id: UUID, known: Names) -> list[AgentRow]:
    active, _ = await deps.jobs.list_jobs(workspace_id, JobFilter(states=ACTIVE), NAMES_LIMIT, "")
    now = deps.clock.now()
    rows = []
    for agent in sorted(known.agents.values(), key=lambda a: a.name):
        mine = [job for job in active if agent.id in _current_agents(job)]
        rows.append(
            AgentRow(
                agent,
                deps.presence.online(agent),
                [run_row(j, known, now) for j in mine],
                known.agent(agent),
            )
        )
    return rows


def _current_agents(job: Job) -> Sequence[UUID]:
    """The agent a job's work happens on now: the stage of its phase (a
    job's runtime reads "agent:<id>", a placement's "<id>")."""
    if job.params is None:
        return ()
    where = job.params.placement
    if job.phase is Phase.LOAD:
        runtime = job.load_runtime or where.load_runtime
    else:
        runtime = job.extract_runtime or where.extract_runtime
    agent = runtime_agent(runtime)
    return (agent,) if agent else ()


def _uuid(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None
