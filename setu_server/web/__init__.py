"""The run monitor and /metrics: setu-server's HTTP listener (docs/monitor.md)."""

from __future__ import annotations

from setu_client.clock import Clock
from setu_server.config import Settings
from setu_server.services import Services
from setu_server.web.app import build_app
from setu_server.web.deps import MonitorDeps
from setu_server.web.listener import HttpListener, start_http

__all__ = ["HttpListener", "MonitorDeps", "build_app", "serve_monitor", "start_http"]


async def serve_monitor(
    settings: Settings, services: Services, clock: Clock
) -> HttpListener | None:
    """The monitor on SETU_HTTP_LISTEN, reading through `services`; None when
    the setting is empty."""
    if not settings.http_listen:
        return None
    return await start_http(
        settings.http_listen, build_app(MonitorDeps.of(services, clock, settings))
    )
