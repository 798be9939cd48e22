"""The HTTP listener of setu-server: the run monitor and /metrics, served by
aiohttp in the server's own event loop."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web

log = logging.getLogger("setu.http")

# Open event streams are cut at shutdown; nothing else on this listener is slow.
SHUTDOWN_SECONDS = 1.0


@dataclass
class HttpListener:
    """A started listener: where it answers, and how to stop it."""

    runner: web.AppRunner
    url: str

    async def stop(self) -> None:
        await self.runner.cleanup()


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (or `[v6]:port`) as a host and a port; SystemExit if malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"SETU_HTTP_LISTEN wants host:port, got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


async def start_http(address: str, app: web.Application) -> HttpListener:
    """Serve `app` on `address` (port 0 picks a free one)."""
    host, port = split_address(address)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_SECONDS)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise SystemExit(f"cannot serve HTTP on {address}: {exc.strerror or exc}") from exc
    bound_host, bound_port = runner.addresses[0][:2]
    # Listening everywhere: this machine's own address is one that answers.
    if bound_host in ("0.0.0.0", "::"):
        bound_host = "127.0.0.1"
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    url = f"http://{shown}:{bound_port}"
    log.info("serving http", extra={"url": url})
    return HttpListener(runner, url)
