"""Which addresses are this machine, asked of the kernel now.

A database on the machine that runs it answers on every address of that
machine (PostgreSQL's `listen_addresses = '*'`), not only on the one its URL
names: loopback in every spelling, each interface's addresses in both
families, and whole networks routed to the loopback interface (Linux
delivers all of 127.0.0.0/8, and any prefix added to `lo`, locally). So
"is this address this machine?" is answered three ways, any of which says
yes: the fixed forms (loopback, unspecified), the interfaces' addresses as
they are now (`getifaddrs`, through psutil), and whether the kernel lets a
socket bind to it (it does exactly for local addresses, a loopback prefix
included). Addresses change (DHCP, a VPN, an operator's `ip addr add`), so
nothing here is cached: each question reads the live state.
"""

from __future__ import annotations

import ipaddress
import socket

import psutil

__all__ = ["addresses", "is_this_machine"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_ALWAYS = tuple(ipaddress.ip_network(n) for n in ("127.0.0.0/8", "0.0.0.0/8", "::1/128", "::/128"))


def addresses() -> frozenset[IPAddress]:
    """Every address of this machine's interfaces now, both families
    (link-local ones without their scope)."""
    found: set[IPAddress] = set()
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                found.add(ipaddress.ip_address(entry.address.partition("%")[0]))
            except ValueError:
                continue
    return frozenset(found)


def is_this_machine(address: IPAddress) -> bool:
    """True when a connection to `address` stays on this machine."""
    if any(address in network for network in _ALWAYS):
        return True
    if address in addresses():
        return True
    return _binds(address)


def _binds(address: IPAddress) -> bool:
    # The kernel's own answer: bind() takes a local address (a prefix routed
    # to `lo` included) and refuses any other with EADDRNOTAVAIL. A machine
    # set to bind non-local addresses (ip_nonlocal_bind) answers yes to all,
    # which errs on the side of refusing.
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True
