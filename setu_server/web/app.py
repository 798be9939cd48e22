"""The monitor's aiohttp application: the middlewares that sign people in
and refuse forged POSTs, the error pages, and the routes (what handlers share
is in setu_server/web/deps.py)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote, urlsplit

from aiohttp import web

from setu_client.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    SetuError,
    Unavailable,
)
from setu_server import metrics
from setu_server.web import actions, live, pages
from setu_server.web.deps import DEPS, SESSION, MonitorDeps, csrf_of, deps_of
from setu_server.web.render import render
from setu_server.web.session import COOKIE, Session

log = logging.getLogger("setu.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
STATIC = Path(__file__).parent / "static"
# Reached without a session: the sign-in page, Prometheus, the stylesheet and script.
PUBLIC = ("/signin", "/metrics", "/static/")


async def metrics_page(request: web.Request) -> web.Response:
    """Prometheus' scrape: no sign-in, as Prometheus expects (docs/monitor.md)."""
    body, content_type = metrics.exposition(deps_of(request).registry)
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type
    return response


async def live_session(deps: MonitorDeps, cookie: str | None) -> Session | None:
    """The request's session, if its cookie is good and its API key still live."""
    session = deps.signer.read(cookie, deps.clock.now())
    if session is None:
        return None
    try:
        keys = await deps.admin.list_api_keys(session.workspace_id)
    except NotFound:  # the workspace is gone
        return None
    if not any(k.id == session.credential_id and k.revoked_at is None for k in keys):
        return None
    return session


@web.middleware
async def signed_in(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every page but the public ones wants a live session; POSTs also a
    same-origin request and the session's CSRF token."""
    if request.path.startswith(PUBLIC):
        if request.method == "POST":
            _same_origin(request)
        return await handler(request)
    session = await live_session(deps_of(request), request.cookies.get(COOKIE))
    if session is None:
        if request.method == "GET" and "text/event-stream" not in request.headers.get("Accept", ""):
            raise web.HTTPSeeOther(f"/signin?next={quote(request.path_qs, safe='')}")
        raise web.HTTPUnauthorized(text="sign in first")
    request[SESSION] = session
    if request.method == "POST":
        _same_origin(request)
        form = await request.post()
        token = form.get("csrf")
        if not isinstance(token, str) or not deps_of(request).signer.csrf_ok(session, token):
            raise web.HTTPForbidden(
                text="this form is stale or was not sent by the monitor: reload the page and retry"
            )
    return await handler(request)


def _same_origin(request: web.Request) -> None:
    """A POST whose Origin names another site is refused (SameSite's backstop)."""
    origin = request.headers.get("Origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.host:
        raise web.HTTPForbidden(text="cross-site form posts are refused")


_ERROR_PAGES: tuple[tuple[type[SetuError], int], ...] = (
    (NotFound, 404),
    (InvalidArgument, 400),
    (FailedPrecondition, 409),
    (DeadlineExceeded, 504),
    (Unavailable, 503),
)


@web.middleware
async def error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Domain errors as pages that say what happened, with the right status."""
    try:
        return await handler(request)
    except SetuError as exc:
        status = next((code for kind, code in _ERROR_PAGES if isinstance(exc, kind)), 400)
        session = request.get(SESSION)
        context = {
            "title": "Not found" if status == 404 else "Refused",
            "message": exc.message,
            "status": status,
            "signed_in": session is not None,
            "csrf": csrf_of(request) if session is not None else "",
            "nav": "",
        }
        return render("error.html", context, status=status)


def build_app(deps: MonitorDeps) -> web.Application:
    app = web.Application(middlewares=[error_pages, signed_in], client_max_size=64 * 1024)
    app[DEPS] = deps
    app.router.add_get("/metrics", metrics_page)
    app.router.add_static("/static/", STATIC)
    app.router.add_get("/signin", pages.signin_page)
    app.router.add_post("/signin", actions.sign_in)
    app.router.add_post("/signout", actions.sign_out)
    app.router.add_get("/", pages.home)
    app.router.add_get("/runs", pages.runs_page)
    app.router.add_get("/runs/live", live.runs_stream)
    app.router.add_get("/runs/{job_id}", pages.run_page)
    app.router.add_get("/runs/{job_id}/live", live.run_stream)
    app.router.add_post("/runs/{job_id}/cancel", actions.cancel_run)
    app.router.add_get("/pipelines", pages.pipelines_page)
    app.router.add_get("/pipelines/{pipeline_id}", pages.pipeline_page)
    app.router.add_post("/pipelines/{pipeline_id}/run", actions.run_now)
    app.router.add_post("/pipelines/{pipeline_id}/pause", actions.pause_pipeline)
    app.router.add_post("/pipelines/{pipeline_id}/resume", actions.resume_pipeline)
    app.router.add_get("/connections", pages.connections_page)
    app.router.add_post("/connections/{connection_id}/test", actions.test_connection)
    app.router.add_post("/connections/{connection_id}/discover", actions.discover_connection)
    app.router.add_get("/agents", pages.agents_page)
    return app
