"""What a pipeline's own page and a connection operation's outcome show,
read through the service layer (scoped to the signed-in workspace as
everything in setu_server/web/reads.py is)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from setu_client.errors import JobNotFound
from setu_server.models import Job, JobFilter, JobKind, JobState, Pipeline
from setu_server.store.stream_state import StreamState
from setu_server.web.deps import MonitorDeps
from setu_server.web.reads import Names, RunRow, run_row

# How many of a pipeline's runs its page lists (the runs list has the rest).
RECENT_RUNS = 10
PAUSED = "paused: schedules make no runs"
# What Run now answers on a paused pipeline (the CLI says the same).
PAUSED_RUN = "pipeline is paused: schedules make no runs; this manual run goes ahead"


@dataclass(frozen=True)
class PipelineView:
    pipeline: Pipeline
    source: str
    destination: str
    runs: list[RunRow]
    more_runs: bool
    # The saved incremental cursor of each stream that has one (GetPipelineState).
    state: list[StreamState]

    @property
    def schedule(self) -> str:
        """The schedule in words: manual, paused, or when it fires."""
        p = self.pipeline
        if not p.schedule:
            return "manual: runs only when asked (Run now, setu run)"
        if p.paused:
            return PAUSED
        return f"on schedule {p.schedule} (UTC)"


async def pipeline_view(
    deps: MonitorDeps, workspace_id: UUID, pipeline_id: UUID, known: Names
) -> PipelineView:
    pipeline = await deps.pipelines.get(workspace_id, pipeline_id)
    where = JobFilter(kinds=frozenset({JobKind.RUN}), pipeline_id=pipeline.id)
    jobs, more = await deps.jobs.list_jobs(workspace_id, where, RECENT_RUNS, "")
    state = await deps.pipelines.state(workspace_id, pipeline.id)
    now = deps.clock.now()
    return PipelineView(
        pipeline=pipeline,
        source=known.connection(pipeline.source_connection_id),
        destination=known.connection(pipeline.destination_connection_id),
        runs=[run_row(job, known, now) for job in jobs],
        more_runs=bool(more),
        state=sorted(state, key=lambda s: s.stream),
    )


async def run_of(deps: MonitorDeps, workspace_id: UUID, pipeline_id: UUID, raw: str) -> Job | None:
    """The run `raw` names, if it is one of this pipeline's (else None)."""
    try:
        job = await deps.jobs.get(workspace_id, UUID(raw))
    except (ValueError, JobNotFound):
        return None
    return job if job.pipeline_id == pipeline_id else None


@dataclass(frozen=True)
class Outcome:
    """What a connection operation started from the monitor answered."""

    connection_id: UUID
    job_id: UUID
    ok: bool
    message: str


async def discover_outcome(deps: MonitorDeps, workspace_id: UUID, job_id: UUID) -> Outcome | None:
    """A discover (a job of this workspace): how many streams it read, or its error."""
    job = await deps.jobs.get(workspace_id, job_id)
    if job.kind is not JobKind.DISCOVER or job.connection_id is None or not job.state.terminal:
        return None
    if job.state is not JobState.SUCCEEDED:
        return Outcome(job.connection_id, job.id, False, job.error_message or job.state.value)
    streams = len((job.result or {}).get("streams", []))
    read = f"{streams} stream{'' if streams == 1 else 's'}"
    return Outcome(job.connection_id, job.id, True, f"read {read} into the catalog below")
