"""nginx as a gRPC proxy in front of setu-server, for the production
topologies (docs/operations.md#proxies-and-load-balancers).

Debian's nginx (installed by scripts/ensure_test_tools.sh), started once per
session on free ports with a config of its own: one `http2` server block per
route, each `grpc_pass`ing to one upstream port, with the route's
`grpc_read_timeout` (none: nginx's default of 60 s). Everything else is
nginx's default, its per-connection limit of 128 streams
(`http2_max_concurrent_streams`) included. A test serves setu-server on
`upstream_port` and talks to `target(route)`:

    async with in_process(database_url, listen=grpc_proxy.upstream) as server:
        SetuClient(grpc_proxy.target("short"), api_key)
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.servers import free_port, tool_process

# The session proxy's routes. "short" cuts a call nginx holds 2 s (standing
# for Envoy's 15 s route timeout, GCP's 30 s), "at_cap" at PROXY_CAP_SECONDS:
# a test serves with that WaitJob cap, as nginx's default 60 s read timeout
# meets the server's 60 s cap.
PROXY_SHORT_SECONDS = 2.0
PROXY_CAP_SECONDS = 3.0
SESSION_ROUTES: dict[str, float | None] = {
    "short": PROXY_SHORT_SECONDS,
    "at_cap": PROXY_CAP_SECONDS,
    "defaults": None,
}


@dataclass(frozen=True)
class GrpcProxy:
    upstream_port: int
    ports: Mapping[str, int]
    read_timeouts: Mapping[str, float | None]
    log_path: Path

    @property
    def upstream(self) -> str:
        """Where the proxied setu-server must listen."""
        return f"127.0.0.1:{self.upstream_port}"

    def target(self, route: str) -> str:
        """The address clients and runtimes dial for `route`."""
        return f"127.0.0.1:{self.ports[route]}"


def nginx_binary() -> str | None:
    # CI's PATH may lack /usr/sbin, where Debian puts it.
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")


def nginx_config(
    folder: Path, upstream_port: int, routes: Mapping[str, tuple[int, float | None]]
) -> str:
    servers = []
    for port, read_timeout in routes.values():
        timeout = f"        grpc_read_timeout {read_timeout:g}s;\n" if read_timeout else ""
        servers.append(
            "    server {\n"
            f"        listen 127.0.0.1:{port} http2;\n"
            "        location / {\n"
            f"            grpc_pass grpc://127.0.0.1:{upstream_port};\n"
            f"{timeout}"
            "        }\n"
            "    }\n"
        )
    temp = "".join(
        f"    {kind}_temp_path {folder / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return (
        "worker_processes 1;\n"
        "events { worker_connections 8192; }\n"
        "http {\n"
        "    access_log off;\n"
        f"{temp}"
        f"{''.join(servers)}"
        "}\n"
    )


@contextlib.contextmanager
def running_nginx(
    routes: Mapping[str, float | None], upstream_port: int | None = None
) -> Iterator[GrpcProxy]:
    """nginx proxying each route (name -> grpc_read_timeout in seconds, None
    for nginx's default) to `upstream_port` (a free port unless given),
    until the block ends."""
    binary = nginx_binary()
    if binary is None:
        pytest.skip("nginx is not installed: run scripts/ensure_test_tools.sh")
    folder = Path(tempfile.mkdtemp(prefix="setu-nginx-"))
    upstream = upstream_port or free_port()
    ports = {name: free_port() for name in routes}
    config = folder / "nginx.conf"
    config.write_text(nginx_config(folder, upstream, {n: (ports[n], t) for n, t in routes.items()}))
    log_path = folder / "error.log"
    # -e: the startup log before the config is read (else /var/log/nginx).
    command = [
        binary,
        "-p",
        str(folder),
        "-c",
        str(config),
        "-e",
        str(log_path),
        "-g",
        f"daemon off; pid {folder / 'nginx.pid'}; error_log stderr notice;",
    ]

    def started(line: bytes) -> bool:
        # The master binds every listener before it starts its worker.
        return b"start worker process" in line

    try:
        with tool_process(command, log_path, started, "nginx"):  # SIGTERM: a fast shutdown
            yield GrpcProxy(upstream, ports, dict(routes), log_path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session", name="grpc_proxy")
def grpc_proxy_fixture() -> Iterator[GrpcProxy]:
    """`grpc_proxy`: the session's nginx, with SESSION_ROUTES to one upstream
    port (a test module imports `grpc_proxy_fixture` to use it)."""
    with running_nginx(SESSION_ROUTES) as proxy:
        yield proxy
