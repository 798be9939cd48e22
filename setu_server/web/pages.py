"""The monitor's pages (GET): runs, a run, pipelines, a pipeline, connections, agents."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from aiohttp import web

from setu_client.errors import JobNotFound, NotFound
from setu_server.models import JobState
from setu_server.web import chart, pipeline_view, reads
from setu_server.web.deps import csrf_of, deps_of, session_of
from setu_server.web.render import render


def base(request: web.Request, nav: str, **context: Any) -> dict[str, Any]:
    """What every signed-in page's layout needs."""
    return {
        "nav": nav,
        "signed_in": True,
        "csrf": csrf_of(request),
        "now": deps_of(request).clock.now(),
        **context,
    }


async def signin_page(request: web.Request) -> web.Response:
    return render("signin.html", signin_context(request.query.get("next", "")))


def signin_context(next_path: str, message: str = "") -> dict[str, Any]:
    return {
        "nav": "",
        "signed_in": False,
        "csrf": "",
        "title": "Sign in",
        "next": next_path,
        "message": message,
    }


async def home(request: web.Request) -> web.Response:
    raise web.HTTPSeeOther("/runs")


async def runs_page(request: web.Request) -> web.Response:
    """Runs, or with `?kind=ops` the connection operations (tests,
    discovers, previews): two lists, each filtered and paged on its own."""
    deps, workspace = deps_of(request), session_of(request).workspace_id
    ops = request.query.get("kind", "") == "ops"
    state = request.query.get("state", "")
    pipeline = "" if ops else request.query.get("pipeline", "")
    connection = request.query.get("connection", "") if ops else ""
    page = request.query.get("page", "")
    known = await reads.names(deps, workspace)
    where = reads.job_filter(state, pipeline, "ops" if ops else "", connection)
    rows, next_page = await reads.run_rows(deps, workspace, where, page, known)
    shown_chart: str = ""
    partial = False
    if not ops:  # what a connection operation moves is no run's rows
        day, partial = await chart.last_day(deps, workspace)
        shown_chart = chart.svg(day)
    filters = {
        k: v
        for k, v in (
            ("kind", "ops" if ops else ""),
            ("state", state),
            ("pipeline", pipeline),
            ("connection", connection),
        )
        if v
    }
    return render(
        "runs.html",
        base(
            request,
            "runs",
            title="Connection operations" if ops else "Runs",
            ops=ops,
            rows=rows,
            next_page=next_page,
            first_page=not page,
            state=state,
            pipeline=pipeline,
            connection=connection,
            states=[s.value for s in JobState],
            pipelines=sorted(known.pipelines.values(), key=lambda p: p.name),
            connections=sorted(known.connections.values(), key=lambda c: c.name),
            query=filters,
            chart=shown_chart,
            chart_partial=partial,
        ),
    )


def job_id_of(request: web.Request) -> UUID:
    """The path's job id; anything but a UUID is a job that is not there."""
    raw = request.match_info["job_id"]
    try:
        return UUID(raw)
    except ValueError:
        raise JobNotFound(f"job {raw} not found") from None


async def run_page(request: web.Request) -> web.Response:
    deps, workspace = deps_of(request), session_of(request).workspace_id
    known = await reads.names(deps, workspace)
    view = await reads.run_view(deps, workspace, job_id_of(request), known)
    return render("run.html", base(request, "runs", title=view.what, run=view))


async def pipelines_page(request: web.Request) -> web.Response:
    deps, workspace = deps_of(request), session_of(request).workspace_id
    known = await reads.names(deps, workspace)
    rows = await reads.pipeline_rows(deps, workspace, known)
    return render("pipelines.html", base(request, "pipelines", title="Pipelines", rows=rows))


async def pipeline_page(request: web.Request) -> web.Response:
    """A pipeline: its schedule, Run now and Pause/Resume, its recent runs,
    its saved state; `?ran=JOB` (after Run now on a paused pipeline) says
    that the manual run went ahead."""
    deps, workspace = deps_of(request), session_of(request).workspace_id
    raw = request.match_info["pipeline_id"]
    try:
        pipeline_id = UUID(raw)
    except ValueError:
        raise NotFound(f"pipeline {raw} not found") from None
    known = await reads.names(deps, workspace)
    view = await pipeline_view.pipeline_view(deps, workspace, pipeline_id, known)
    ran = await pipeline_view.run_of(deps, workspace, pipeline_id, request.query.get("ran", ""))
    context = base(
        request,
        "pipelines",
        title=view.pipeline.name,
        view=view,
        ran=ran,
        paused_run=pipeline_view.PAUSED_RUN,
    )
    return render("pipeline.html", context)


async def connections_page(request: web.Request) -> web.Response:
    deps, workspace = deps_of(request), session_of(request).workspace_id
    known = await reads.names(deps, workspace)
    rows = await reads.connection_rows(deps, workspace, known)
    tested = None
    if "tested" in request.query:
        try:
            tested = await reads.test_outcome(deps, workspace, UUID(request.query["tested"]))
        except (ValueError, JobNotFound):
            tested = None
    discovered = None
    if "discovered" in request.query:
        try:
            found = UUID(request.query["discovered"])
            discovered = await pipeline_view.discover_outcome(deps, workspace, found)
        except (ValueError, JobNotFound):
            discovered = None
    context = base(
        request,
        "connections",
        title="Connections",
        rows=rows,
        tested=tested,
        discovered=discovered,
    )
    return render("connections.html", context)


async def agents_page(request: web.Request) -> web.Response:
    deps, workspace = deps_of(request), session_of(request).workspace_id
    known = await reads.names(deps, workspace)
    rows = await reads.agent_rows(deps, workspace, known)
    return render("agents.html", base(request, "agents", title="Agents", rows=rows))
