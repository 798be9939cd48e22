"""Live updates as Server-Sent Events.

A run page's stream follows the job through the watch hub (JobService.watch,
the same path as WatchJob): every new snapshot sends the run's header,
progress and outputs re-rendered, and the timeline's new events. Events can
land without a new snapshot, so a quiet stream re-reads them at each
keep-alive. Every run stream ends with an `end` event once the job is
over, also when it was over before the stream opened (the page of a finished
run): then it sends only what the page lacks, and the page does not
reconnect. The runs list's stream re-reads its first page every few
seconds and sends it when it changed. Each message's id lets a reconnecting
EventSource resume where it stopped (Last-Event-ID)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

from aiohttp import web

from setu_server.models import Job
from setu_server.web import reads
from setu_server.web.deps import MonitorDeps, deps_of, session_of
from setu_server.web.pages import job_id_of
from setu_server.web.render import fragment

KEEPALIVE_SECONDS = 10.0
# The runs list's stream re-reads names (pipelines, agents) every this many refreshes.
NAMES_EVERY = 15


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # a proxy in front must not hold the stream
        }
    )
    await response.prepare(request)
    return response


async def send(response: web.StreamResponse, event: str, data: Any, id_: str = "") -> None:
    lines = [f"event: {event}"]
    if id_:
        lines.append(f"id: {id_}")
    lines.append("data: " + json.dumps(data, separators=(",", ":")))
    await response.write(("\n".join(lines) + "\n\n").encode())


def resume_point(request: web.Request) -> tuple[int, int]:
    """(version, event sequence) the client already shows: from Last-Event-ID
    on a reconnect, else from the page's query string."""
    raw = request.headers.get("Last-Event-ID") or (
        f"{request.query.get('version', '0')}:{request.query.get('after', '0')}"
    )
    version, _, sequence = raw.partition(":")
    try:
        return max(int(version), 0), max(int(sequence), 0)
    except ValueError:
        return 0, 0


async def run_stream(request: web.Request) -> web.StreamResponse:
    deps, workspace = deps_of(request), session_of(request).workspace_id
    job_id = job_id_of(request)
    version, after = resume_point(request)
    # Not found (another workspace's job) answers 404 before the stream opens.
    await deps.jobs.get(workspace, job_id)
    response = await open_stream(request)
    known = await reads.names(deps, workspace)
    # The reader going away ends the stream; it is no error of ours.
    with contextlib.suppress(ConnectionResetError):
        async with _snapshots(deps, workspace, job_id, version) as snapshots:
            while True:
                try:
                    job = await asyncio.wait_for(snapshots.get(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    job = await deps.jobs.get(workspace, job_id)
                if job is None:
                    # The watch ended with nothing newer than `version`: the
                    # job was over when the page drew it, or this server is
                    # stopping (then the page reconnects, to a successor or
                    # another replica).
                    job = await deps.jobs.get(workspace, job_id)
                    if not job.state.terminal:
                        break
                    after = await _send_run(
                        response, deps, workspace, job, after, known, shown=version
                    )
                    await send(response, "end", {"state": job.state.value})
                    break
                after = await _send_run(response, deps, workspace, job, after, known)
                if job.state.terminal:
                    await send(response, "end", {"state": job.state.value})
                    break
    return response


@contextlib.asynccontextmanager
async def _snapshots(
    deps: MonitorDeps, workspace: UUID, job_id: UUID, version: int
) -> AsyncIterator[asyncio.Queue[Job | None]]:
    """The job's snapshots newer than `version`, from the watch hub; None
    when the watch ends without a terminal one (shutdown)."""
    queue: asyncio.Queue[Job | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for job in deps.jobs.watch(workspace, job_id, version):
                queue.put_nowait(job)
        finally:
            queue.put_nowait(None)

    task = asyncio.create_task(pump(), name=f"setu-monitor-watch-{job_id}")
    try:
        yield queue
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def _send_run(
    response: web.StreamResponse,
    deps: MonitorDeps,
    workspace: UUID,
    job: Job,
    after: int,
    known: reads.Names,
    shown: int = -1,
) -> int:
    """One message with the run as `job` shows it and the events after
    `after`; answers the last event sequence sent. Nothing is sent when the
    page already shows version `shown` of the job and no event is new."""
    job, outputs = await deps.jobs.outputs(workspace, job.id)
    events, _ = await deps.jobs.events(workspace, job.id, after, reads.EVENTS_PAGE, "")
    if not events and job.version <= shown:
        return after
    view = reads.view_of(job, outputs, events, known, deps.clock.now())
    last = view.last_sequence or after
    await send(
        response,
        "run",
        {
            "state": job.state.value,
            "version": job.version,
            "header": fragment("_run_header.html", {"run": view}),
            "placement": fragment("_placement.html", {"run": view}) if job.params else "",
            "progress": fragment("_run_progress.html", {"run": view}),
            "events": fragment("_events.html", {"events": events}),
        },
        id_=f"{job.version}:{last}",
    )
    return last


async def runs_stream(request: web.Request) -> web.StreamResponse:
    deps, workspace = deps_of(request), session_of(request).workspace_id
    query = request.query
    where = reads.job_filter(
        query.get("state", ""),
        query.get("pipeline", ""),
        query.get("kind", ""),
        query.get("connection", ""),
    )
    rows_template = "_op_rows.html" if where.kinds == reads.OPERATIONS else "_run_rows.html"
    response = await open_stream(request)
    sent = ""
    known = await reads.names(deps, workspace)
    with contextlib.suppress(ConnectionResetError):  # the reader went away
        for tick in itertools.count(1):
            rows, _ = await reads.run_rows(deps, workspace, where, "", known)
            html = fragment(rows_template, {"rows": rows})
            if html != sent:
                await send(response, "rows", {"html": html})
                sent = html
            else:
                await response.write(b": keep-alive\n\n")
            await asyncio.sleep(deps.list_refresh_seconds)
            if tick % NAMES_EVERY == 0:  # a renamed pipeline or a new agent
                known = await reads.names(deps, workspace)
    return response
