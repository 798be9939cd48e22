"""The monitor's actions (POST): sign in and out, cancel a run, run a
pipeline now, pause or resume it, test or discover a connection. Each
answers with a redirect (303) to the page that shows the outcome, so a
reload never repeats it. Any signed-in session of the workspace may take
them, as its API key may make the same gRPC calls."""

from __future__ import annotations

from uuid import UUID

from aiohttp import web

from setu_client.errors import NotFound, PermissionDenied, Unauthenticated
from setu_server.models import Role, TaskKind
from setu_server.service.pipelines import PipelineDraft
from setu_server.web.deps import deps_of, session_of
from setu_server.web.pages import job_id_of, signin_context
from setu_server.web.render import render
from setu_server.web.session import COOKIE, LIFETIME

TEST_TIMEOUT_SECONDS = 30.0


async def sign_in(request: web.Request) -> web.Response:
    """An API key (workspace scope) in, a session cookie out; the key itself
    is checked as every gRPC call checks it and is kept nowhere."""
    deps = deps_of(request)
    form = await request.post()
    key = str(form.get("api_key", "")).strip()
    next_path = _local_path(str(form.get("next", "")))
    try:
        principal = await deps.auth.authenticate(f"Bearer {key}", Role.CLIENT)
    except (Unauthenticated, PermissionDenied) as exc:
        message = exc.message if key else "paste an API key of your workspace"
        return render("signin.html", signin_context(next_path, message), status=401)
    assert principal.workspace_id is not None and principal.credential_id is not None
    cookie, _ = deps.signer.issue(principal.workspace_id, principal.credential_id, deps.clock.now())
    response = web.HTTPSeeOther(next_path or "/runs")
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=int(LIFETIME.total_seconds()),
        httponly=True,
        samesite="Strict",
        secure=request.secure,
        path="/",
    )
    raise response


async def sign_out(request: web.Request) -> web.Response:
    response = web.HTTPSeeOther("/signin")
    response.del_cookie(COOKIE, path="/")
    raise response


async def cancel_run(request: web.Request) -> web.Response:
    job_id = job_id_of(request)
    await deps_of(request).jobs.cancel(
        session_of(request).workspace_id, job_id, "cancelled from the monitor"
    )
    raise web.HTTPSeeOther(f"/runs/{job_id}")


async def run_now(request: web.Request) -> web.Response:
    """A manual run, to its page; on a paused pipeline it goes ahead all the
    same, and the pipeline's page says so (paused stops the schedule only)."""
    deps, workspace = deps_of(request), session_of(request).workspace_id
    pipeline_id = _uuid(request.match_info["pipeline_id"], "pipeline")
    pipeline = await deps.pipelines.get(workspace, pipeline_id)
    job = await deps.runs.submit(
        workspace, pipeline_id, start=True, dry_run=False, idempotency_key=""
    )
    if pipeline.paused:
        raise web.HTTPSeeOther(f"/pipelines/{pipeline_id}?ran={job.id}")
    raise web.HTTPSeeOther(f"/runs/{job.id}")


async def pause_pipeline(request: web.Request) -> web.Response:
    return await _set_paused(request, True)


async def resume_pipeline(request: web.Request) -> web.Response:
    return await _set_paused(request, False)


async def _set_paused(request: web.Request, paused: bool) -> web.Response:
    """As UpdatePipeline with update_mask `paused`: resuming computes the next tick."""
    pipeline_id = _uuid(request.match_info["pipeline_id"], "pipeline")
    change = PipelineDraft(
        name="", source_connection_id=None, destination_connection_id=None, paused=paused
    )
    await deps_of(request).pipelines.update(
        session_of(request).workspace_id, pipeline_id, change, ["paused"]
    )
    raise web.HTTPSeeOther(f"/pipelines/{pipeline_id}")


async def test_connection(request: web.Request) -> web.Response:
    """Blocks until the connection's runtime answers (bounded), like TestConnection."""
    connection_id = _uuid(request.match_info["connection_id"], "connection")
    job, _ = await deps_of(request).connection_ops.run(
        session_of(request).workspace_id, connection_id, TaskKind.TEST, {}, TEST_TIMEOUT_SECONDS
    )
    raise web.HTTPSeeOther(f"/connections?tested={job.id}#connection-{connection_id}")


async def discover_connection(request: web.Request) -> web.Response:
    """Blocks until the connection's runtime answers (bounded), like DiscoverStreams;
    the page then shows the new catalog and links to the discover job."""
    connection_id = _uuid(request.match_info["connection_id"], "connection")
    job, _ = await deps_of(request).connection_ops.run(
        session_of(request).workspace_id, connection_id, TaskKind.DISCOVER, {}, TEST_TIMEOUT_SECONDS
    )
    raise web.HTTPSeeOther(f"/connections?discovered={job.id}#connection-{connection_id}")


def _uuid(raw: str, what: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError:
        raise NotFound(f"{what} {raw} not found") from None


def _local_path(path: str) -> str:
    """Where to go after signing in: a path on this site, never another site."""
    local = path.startswith("/") and not path.startswith("//") and "\\" not in path
    return path if local else ""
