"""Where a connection may open a socket, decided by address, not by name.

A host name is only a question to DNS: `127.1`, `2130706433`, `0x7f000001`,
`::ffff:127.0.0.1`, the machine's own name and any domain an attacker
controls can all mean loopback. So a connection that must stay away from
the network it runs in (a tenant's connection in the cloud runtime) resolves
its host once, every address the answer holds is checked, and the socket is
opened to the vetted address itself (the name is kept for TLS), so a second
DNS answer cannot differ from the one that was checked.

Denied by default: every address that is not globally routable (loopback,
unspecified, link-local with the cloud metadata address, private and shared
ranges, reserved, documentation and benchmark ranges), multicast, and the
IPv6 forms that carry such an IPv4 address (mapped, compatible, NAT64,
6to4, Teredo). An operator allows networks with a list of CIDRs; the
control plane's own database stays denied whatever the list says: the
addresses its URL names, and, when it runs on this machine, its port at
every address of this machine (asked of the kernel at each check, as
addresses change: this_machine.py) and its Unix socket folders, by the
file they are, whatever path or link names them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from setu_engine.errors import ConfigError, ProviderError
from setu_engine.support.this_machine import is_this_machine

__all__ = ["AddressPolicy", "Egress", "parse_networks", "protect_database", "why_denied"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")


class Egress(Protocol):
    """Vets the host a connection is about to open a socket to (AddressPolicy
    below); None where the runtime's own network is the limit."""

    async def address(self, host: str, port: int, field: str) -> str:
        """The address to connect to for `host`: resolved and allowed.
        Raises ConfigError (naming `field`) for a denied address, and
        ProviderError when the name does not resolve."""
        ...


def parse_networks(text: str | Iterable[str], setting: str) -> tuple[IPNetwork, ...]:
    """CIDRs from a comma-separated setting (or a list); SystemExit naming
    the setting on a bad one."""
    items = text.split(",") if isinstance(text, str) else list(text)
    networks = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise SystemExit(f"{setting}: {item!r} is not a network (e.g. 10.0.0.0/8)") from exc
    return tuple(networks)


def embedded(address: IPAddress) -> Iterator[IPAddress]:
    """The address and every IPv4 address an IPv6 address carries."""
    yield address
    if isinstance(address, ipaddress.IPv4Address):
        return
    if address.ipv4_mapped is not None:
        yield address.ipv4_mapped
    if address.sixtofour is not None:
        yield address.sixtofour
    if address.teredo is not None:
        yield from address.teredo
    if address in _NAT64 or (address in _COMPATIBLE and int(address) > 1):
        yield ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)


def why_denied(address: IPAddress) -> str | None:
    """What kind of address this is when a connection may not reach it by
    default, else None."""
    # An IPv6 form that carries an IPv4 address goes where that address goes.
    carried = list(embedded(address))
    for each in carried[1:] or carried:
        if each.is_loopback:
            return "a loopback address (this machine itself)"
        if each.is_unspecified:
            return "the unspecified address (this machine itself)"
        if each.is_link_local:
            return "a link-local address (where cloud metadata services answer)"
        if each.is_multicast:
            return "a multicast address"
        if each.is_private or not each.is_global or each.is_reserved:
            return "a private or reserved address"
    return None


@dataclass(frozen=True)
class AddressPolicy:
    """An Egress that resolves, checks every answer, and pins the address."""

    allow: Sequence[IPNetwork] = ()
    # (network, port) always denied, even inside `allow`: the control plane's
    # own database (`protect_database` builds it).
    protected: Sequence[tuple[IPNetwork, int]] = ()
    # Ports of the control plane's own database when it runs on this
    # machine: denied at every address of this machine, as it is now.
    local_ports: frozenset[int] = frozenset()
    # The Unix socket folders of the control plane's own database.
    socket_folders: Sequence[str] = ()
    fix: str = field(
        default="place the connection on an agent inside that network, or have the "
        "operator allow the network (SETU_CLOUD_ALLOW_NETWORKS)"
    )

    async def address(self, host: str, port: int, field: str) -> str:
        loop = asyncio.get_running_loop()
        try:
            answers = await loop.getaddrinfo(
                host.strip("[]"), port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
        except (socket.gaierror, UnicodeError) as exc:
            raise ProviderError(f"{field}: the host name does not resolve ({exc})") from exc
        addresses = [ipaddress.ip_address(str(a[4][0]).partition("%")[0]) for a in answers]
        if not addresses:
            raise ProviderError(f"{field}: the host name resolves to no address")
        for address in addresses:
            self.check(address, port, field)
        return str(addresses[0])

    def check(self, address: IPAddress, port: int, field: str) -> None:
        """ConfigError naming `field` unless a connection may reach `address`."""
        carried = list(embedded(address))
        if any(a in net and port == p for a in carried for net, p in self.protected) or (
            port in self.local_ports and any(is_this_machine(a) for a in carried)
        ):
            raise ConfigError(
                f"{field}: resolves to the address of Setu's own database, which no "
                f"connection may reach"
            )
        if any(a in network for a in carried for network in self.allow):
            return
        why = why_denied(address)
        if why is not None:
            raise ConfigError(
                f"{field}: resolves to {why}, which a cloud connection may not reach; {self.fix}"
            )

    def check_socket(self, host: str, port: int, field: str) -> None:
        """ConfigError naming `field` when the Unix socket a PostgreSQL
        driver opens for `host` (a folder, or the socket file itself) at
        `port` is one of the control plane's own database: in one of its
        socket folders (compared as files, so another spelling, a link or
        a bind mount of the folder is the folder), or a link to one of its
        socket files."""
        # Where libpq and asyncpg go: `host` itself when it names a socket
        # file, else the folder's `.s.PGSQL.<port>`.
        target = Path(host if ".s.PGSQL." in host else os.path.join(host, f".s.PGSQL.{port}"))
        try:
            resolved = target.resolve()
        except (OSError, RuntimeError) as exc:  # a loop of links
            raise ConfigError(f"{field}: {exc}") from exc
        for folder in self.socket_folders:
            if _is_own_socket(resolved, Path(folder)):
                raise ConfigError(
                    f"{field}: names the socket folder of Setu's own database, which no "
                    f"connection may reach"
                )


def _is_own_socket(target: Path, folder: Path) -> bool:
    try:
        own = folder.resolve()
    except (OSError, RuntimeError):
        return False
    if target.is_relative_to(own) or _same(target.parent, own):
        return True
    # A link (hard or symbolic) elsewhere to one of the folder's sockets.
    try:
        entries = [own / name for name in os.listdir(own) if name.startswith(".s.PGSQL.")]
    except OSError:
        return False
    return any(_same(target, entry) for entry in entries)


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


_THIS_MACHINE = tuple(
    ipaddress.ip_network(n) for n in ("127.0.0.0/8", "::1/128", "0.0.0.0/32", "::/128")
)


def protect_database(host: str, port: int) -> tuple[tuple[IPNetwork, int], ...]:
    """The (network, port) pairs that reach a database at host:port. A
    database on this machine is reachable through every local address, so
    all of them are protected at its port."""
    addresses = _resolve(host)
    networks: list[IPNetwork] = [ipaddress.ip_network(a) for a in addresses]
    if any(a.is_loopback or a.is_unspecified for a in addresses):
        networks += _THIS_MACHINE
        networks += [ipaddress.ip_network(a) for a in _resolve(socket.gethostname())]
    return tuple((network, port) for network in dict.fromkeys(networks))


def _resolve(host: str) -> list[IPAddress]:
    try:
        answers = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return [ipaddress.ip_address(str(a[4][0]).partition("%")[0]) for a in answers]
