"""DNS rebinding, end to end through a real connection: a name the egress
policy vets at one address and that resolves elsewhere a moment later is
connected to at the vetted address. Two PostgreSQL look-alikes listen on
the same port, one at the address allowed and vetted, one on 127.0.0.1
where the name turns; the resolver (socket.getaddrinfo) answers as the
test says."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import AsyncIterator

import pytest

from setu_engine.errors import ProviderError
from setu_engine.providers.postgres import PROVIDER as POSTGRES
from setu_engine.support.egress import AddressPolicy
from tests.e2e.test_cloud_egress import FakePostgres

HOST = "rebind.example"
VETTED = "127.0.0.2"
TURNED = "127.0.0.1"


@contextlib.asynccontextmanager
async def twins() -> AsyncIterator[tuple[FakePostgres, FakePostgres]]:
    """A look-alike at VETTED and one at TURNED, on one port."""
    for _ in range(20):  # the port taken at VETTED may be in use at TURNED
        vetted, turned = FakePostgres(), FakePostgres()
        first = await asyncio.start_server(vetted.serve, VETTED, 0)
        port = first.sockets[0].getsockname()[1]
        try:
            second = await asyncio.start_server(turned.serve, TURNED, port)
        except OSError:
            first.close()
            await first.wait_closed()
            continue
        vetted.port = turned.port = port
        async with first, second:
            yield vetted, turned
        return
    raise AssertionError("no port free at both addresses")


async def test_a_connection_goes_to_the_vetted_address_when_the_name_turns_to_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = socket.getaddrinfo
    asked: list[str] = []

    def rebinding(host: object, port: object, *args: object, **kwargs: object) -> object:
        if host != HOST:
            return real(host, port, *args, **kwargs)  # type: ignore[arg-type]
        address = VETTED if not asked else TURNED
        asked.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    policy = AddressPolicy(allow=(ipaddress.ip_network(f"{VETTED}/32"),))
    async with twins() as (vetted, turned):
        config = {"host": HOST, "port": vetted.port, "database": "d", "user": "u"}
        with pytest.raises(ProviderError, match="password authentication failed"):
            await POSTGRES.connect(config, policy)
    assert len(vetted.startups) == 1, "connected at the address the policy checked"
    assert turned.startups == [], "never at where the name pointed next"
    assert asked == [VETTED]
