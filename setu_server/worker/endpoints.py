"""The endpoints of the server's own database, which no cloud connection may
reach whatever networks the operator allows. The server names them to its
cloud workers at check-in; the workers never see the database URL itself."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit


def database_endpoints(url: str) -> list[str]:
    """`host:port` of every TCP host a libpq URL names (Unix sockets left
    out: the per-workspace file roots keep tenants off those)."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    netloc = parts.netloc.rpartition("@")[2]
    hosts = query.get("host") or ([netloc] if netloc else [])
    ports = query.get("port", [])
    found = []
    for spec in ",".join(hosts).split(","):
        host, port = spec, ports[0] if ports else ""
        if spec.startswith("["):
            host, _, rest = spec[1:].partition("]")
            port = rest.lstrip(":") or port
        elif spec.count(":") == 1:
            host, port = spec.split(":")
        if host and not host.startswith("/"):
            found.append(f"[{host}]:{port or 5432}" if ":" in host else f"{host}:{port or 5432}")
    return found
