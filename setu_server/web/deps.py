"""What every monitor handler reads and acts through: the server's services
(MonitorDeps), the request's session and its CSRF token. Below the handlers
and the application that routes to them, so neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry

from setu_client.clock import Clock
from setu_server import metrics
from setu_server.config import Settings
from setu_server.service.admin import AdminService
from setu_server.service.agents import AgentPresence
from setu_server.service.auth import Authenticator
from setu_server.service.connection_ops import ConnectionOps
from setu_server.service.connections import ConnectionService
from setu_server.service.jobs import JobService
from setu_server.service.pipelines import PipelineService
from setu_server.service.runs import RunService
from setu_server.services import Services
from setu_server.web.session import Session, SessionSigner


@dataclass(frozen=True)
class MonitorDeps:
    """What the monitor reads and acts through: the server's own services,
    so a page sees exactly what the gRPC API would show the same key."""

    auth: Authenticator
    admin: AdminService
    jobs: JobService
    runs: RunService
    pipelines: PipelineService
    connections: ConnectionService
    connection_ops: ConnectionOps
    presence: AgentPresence
    clock: Clock
    signer: SessionSigner = field(default_factory=lambda: SessionSigner(""))
    # How often the runs list re-reads its first page for its live stream.
    list_refresh_seconds: float = 2.0
    # What /metrics renders: this server's own registry (Services.metrics).
    registry: CollectorRegistry = metrics.REGISTRY

    @classmethod
    def of(cls, services: Services, clock: Clock, settings: Settings) -> MonitorDeps:
        return cls(
            auth=services.auth,
            admin=services.admin,
            jobs=services.jobs,
            runs=services.runs,
            pipelines=services.pipelines,
            connections=services.connections,
            connection_ops=services.connection_ops,
            presence=services.presence,
            clock=clock,
            signer=SessionSigner(settings.page_token_key),
            registry=services.metrics.registry,
        )


DEPS = web.AppKey("deps", MonitorDeps)
SESSION = web.RequestKey("session", Session)


def deps_of(request: web.Request) -> MonitorDeps:
    return request.app[DEPS]


def session_of(request: web.Request) -> Session:
    return request[SESSION]


def csrf_of(request: web.Request) -> str:
    return deps_of(request).signer.csrf_token(session_of(request))
