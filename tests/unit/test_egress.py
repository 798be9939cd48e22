"""Egress by address: every spelling of a denied address is denied, because
the host is resolved and each answer checked (setu_engine/support/egress.py).
Only numeric hosts and this machine's own names are resolved here: no
network is needed."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from setu_engine.errors import ConfigError
from setu_engine.support.egress import AddressPolicy, parse_networks, protect_database, why_denied

LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "127.1",
    "2130706433",
    "0x7f000001",
    "0177.0.0.1",
    "localhost",
    "::1",
    "[::1]",
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "::127.0.0.1",
    "64:ff9b::7f00:1",
    "2002:7f00:1::",
]
UNSPECIFIED_SPELLINGS = ["0", "0.0.0.0", "::", "::ffff:0.0.0.0"]
METADATA = ["169.254.169.254", "fd00:ec2::254", "fe80::1", "::ffff:169.254.169.254"]
PRIVATE = ["10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "fc00::1", "198.18.0.1"]
OTHER = ["224.0.0.1", "ff02::1", "240.0.0.1", "255.255.255.255"]
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


async def _refused(policy: AddressPolicy, host: str, port: int = 5432) -> str:
    with pytest.raises(ConfigError) as info:
        await policy.address(host, port, "config.host")
    return str(info.value)


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS + UNSPECIFIED_SPELLINGS)
async def test_every_spelling_of_this_machine_is_refused(host: str) -> None:
    message = await _refused(AddressPolicy(), host)
    assert message.startswith("config.host: resolves to ")
    assert "this machine itself" in message
    assert "place the connection on an agent" in message


async def test_this_machines_own_host_name_is_refused() -> None:
    message = await _refused(AddressPolicy(), socket.gethostname())
    assert "may not reach" in message


@pytest.mark.parametrize("host", METADATA)
async def test_link_local_and_the_metadata_address_are_refused(host: str) -> None:
    assert "link-local" in await _refused(AddressPolicy(), host) or host.startswith("fd00")


@pytest.mark.parametrize("host", PRIVATE + OTHER)
async def test_private_reserved_and_multicast_addresses_are_refused(host: str) -> None:
    assert "may not reach" in await _refused(AddressPolicy(), host)


@pytest.mark.parametrize("host", PUBLIC)
async def test_public_addresses_are_reached_at_the_address_checked(host: str) -> None:
    address = await AddressPolicy().address(host, 5432, "config.host")
    assert ipaddress.ip_address(address) == ipaddress.ip_address(host)


async def test_an_allowed_network_is_reached_and_no_other() -> None:
    policy = AddressPolicy(allow=parse_networks("10.0.0.0/8, fd00::/8", "test"))
    assert await policy.address("10.1.2.3", 5432, "config.host") == "10.1.2.3"
    assert await policy.address("fd12::5", 5432, "config.host") == "fd12::5"
    assert "private" in await _refused(policy, "192.168.1.1")
    assert "this machine itself" in await _refused(policy, "127.0.0.1")


async def test_the_servers_own_database_is_refused_even_inside_an_allowed_network() -> None:
    policy = AddressPolicy(
        allow=parse_networks("10.0.0.0/8", "test"), protected=protect_database("10.0.0.5", 5432)
    )
    assert "Setu's own database" in await _refused(policy, "10.0.0.5", 5432)
    assert "Setu's own database" in await _refused(policy, "::ffff:10.0.0.5", 5432)
    # The same host's other services stay reachable when allowed.
    assert await policy.address("10.0.0.5", 8080, "config.host") == "10.0.0.5"


async def test_a_database_on_this_machine_is_protected_through_every_local_address() -> None:
    policy = AddressPolicy(
        allow=parse_networks("0.0.0.0/0, ::/0", "test"),
        protected=protect_database("127.0.0.1", 5432),
    )
    for host in ("127.0.0.1", "127.1", "0", "::1", "::ffff:127.0.0.2", socket.gethostname()):
        assert "Setu's own database" in await _refused(policy, host, 5432), host
    assert await policy.address("127.0.0.1", 9000, "config.host") == "127.0.0.1"


def test_bad_networks_name_the_setting() -> None:
    with pytest.raises(SystemExit, match="SETU_CLOUD_ALLOW_NETWORKS: 'ten' is not a network"):
        parse_networks("10.0.0.0/8,ten", "SETU_CLOUD_ALLOW_NETWORKS")


def test_public_addresses_have_no_reason_to_be_denied() -> None:
    for host in PUBLIC:
        assert why_denied(ipaddress.ip_address(host)) is None
