"""DNS rebinding: a name that resolves to a public address when the egress
policy checks it, and to loopback a moment later, is reached at the address
that was checked (setu_engine/support/egress.py). The resolver is the seam:
socket.getaddrinfo, answering as the test says."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from setu_engine.support.egress import AddressPolicy

HOST = "rebind.example"


class RebindingDns:
    """First answer public, every later one loopback; other names as usual."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.asked = 0

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != HOST:
            return self._real(host, port, *args, **kwargs)
        self.asked += 1
        address = "8.8.8.8" if self.asked == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]


async def test_a_name_is_reached_at_the_address_checked_not_a_later_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dns = RebindingDns(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", dns)
    address = await AddressPolicy().address(HOST, 5432, "config.host")
    assert address == "8.8.8.8", "the vetted address, not the name to look up again"
    assert dns.asked == 1
