"""A tenant never reaches Setu's own database, by any path (issue 23, audit
item 1): not through its Unix socket folder (or a link to it, or to its
socket) whatever SETU_LOCAL_FILES_ROOT is, `/` included; and not through any
address of this machine at its port, when the operator allows the networks
those addresses are on. A real server, its real cloud worker, the real
database (setu_engine/support/egress.py, setu_agent/cloud/policy.py,
setu_server/worker/endpoints.py)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from setu_client import SetuClient
from setu_client.errors import Aborted
from setu_engine.support import this_machine
from tests.e2e.test_cloud_egress import tcp_front
from tests.factories import Tenant
from tests.servers import in_process

OWN_SOCKET = "config.host: names the socket folder of Setu's own database"
OWN_ADDRESS = "config.host: resolves to the address of Setu's own database"
# Addresses this test gives the machine (documentation and ULA ranges).
ADDED = ("198.51.100.77", "fd00:5e70::2")


async def refusal(client: SetuClient, config: dict[str, object]) -> str:
    connection = await client.create_connection(f"c-{len(str(config))}", "postgres", config)
    answer = await client.test_connection(connection.id)
    await client.delete_connection(connection.id)
    assert not answer.ok, (config, answer.message)
    return answer.message


def socket_folder(url: str) -> Path:
    return Path(parse_qs(urlsplit(url).query)["host"][0])


async def test_the_socket_folder_is_refused_with_a_files_root_of_slash(
    database_url: str, tenant: Tenant, tmp_path: Path
) -> None:
    folder = socket_folder(database_url)
    name = urlsplit(database_url).path.lstrip("/")
    links = tmp_path / "links"
    links.mkdir()
    (links / "pg").symlink_to(folder, target_is_directory=True)
    (links / "sock").symlink_to(folder / ".s.PGSQL.5432")
    hosts = [str(folder), f"{folder}/", str(links / "pg"), str(links / "sock")]
    # SETU_LOCAL_FILES_ROOT=/ (the tests' default) confines nothing.
    async with (
        in_process(database_url, data_dir=tmp_path / "server", local_files_root="/") as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        for host in hosts:
            config = {"host": host, "database": name, "user": "postgres"}
            assert OWN_SOCKET in await refusal(client, config), host
        theft = await client.create_connection(
            "theft", "postgres", {"host": str(links / "pg"), "database": name, "user": "postgres"}
        )
        with pytest.raises(Aborted, match="socket folder of Setu's own database") as refused:
            await client.discover_streams(theft.id)
        assert "api_key" not in str(refused.value)


def ip_command() -> str:
    """iproute2's `ip`, when this test may give the machine addresses; else
    the test skips, saying why."""
    for candidate in (shutil.which("ip"), "/usr/sbin/ip", "/sbin/ip", "/bin/ip"):
        if candidate and os.access(candidate, os.X_OK):
            if os.geteuid() != 0:
                break
            return candidate
    pytest.skip("giving this machine another address needs root and iproute2 (ip)")


@contextlib.contextmanager
def added_to_loopback(ip: str, *addresses: str) -> Iterator[None]:
    """`addresses` on the loopback interface for the block, removed after."""
    added = []
    try:
        for address in addresses:
            if "/" not in address:
                address += "/32" if ipaddress.ip_address(address).version == 4 else "/128"
            done = subprocess.run(
                [ip, "addr", "add", address, "dev", "lo"], capture_output=True, text=True
            )
            if done.returncode == 0:
                added.append(address)
            elif "exists" not in done.stderr:
                raise AssertionError(f"ip addr add {address}: {done.stderr}")
        yield
    finally:
        for address in added:
            subprocess.run([ip, "addr", "del", address, "dev", "lo"], capture_output=True)


@contextlib.asynccontextmanager
async def own_database_everywhere(database_url: str) -> AsyncIterator[tuple[str, int]]:
    """Setu's own database served on every address of this machine (both
    families), and the URL a server uses to reach it on 127.0.0.1."""
    async with tcp_front(database_url, everywhere=True) as port:
        name = urlsplit(database_url).path.lstrip("/")
        yield f"postgresql://postgres@127.0.0.1:{port}/{name}", port


async def test_every_address_of_this_machine_at_the_database_port_is_refused(
    database_url: str, tenant: Tenant, tmp_path: Path
) -> None:
    theirs = sorted(
        str(a)
        for a in this_machine.addresses()
        if not (a.is_loopback or a.is_link_local or a.is_unspecified)
    )
    # The networks an operator opens to reach a VPC: every one this machine
    # is on, and the ones this test adds to it.
    allow = ", ".join(["127.0.0.0/8", "::1/128", "198.51.100.0/24", "fd00::/8", *theirs])
    ip = ip_command()
    async with (
        own_database_everywhere(database_url) as (url, port),
        in_process(url, data_dir=tmp_path / "server", cloud_allow_networks=allow) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        name = urlsplit(url).path.lstrip("/")

        def at(host: str) -> dict[str, object]:
            return {"host": host, "port": port, "database": name, "user": "postgres"}

        # The worker has checked in: the addresses added next are not in
        # what the server named to it, only in the machine's live state.
        assert OWN_ADDRESS in await refusal(client, at("127.0.0.1"))
        with added_to_loopback(ip, *ADDED):
            hosts = [*ADDED, f"::ffff:{ADDED[0]}", *theirs]
            for host in hosts:
                assert OWN_ADDRESS in await refusal(client, at(host)), host
            theft = await client.create_connection("theft", "postgres", at(ADDED[1]))
            with pytest.raises(Aborted, match="Setu's own database"):
                await client.preview_stream(theft.id, "public.api_key")


def test_a_prefix_on_loopback_is_this_machine_at_every_address_in_it() -> None:
    # Linux delivers a whole prefix added to `lo` locally, though the
    # interface lists one address of it: the kernel's answer counts.
    with added_to_loopback(ip_command(), "198.51.100.129/26"):
        listed = this_machine.addresses()
        assert ipaddress.ip_address("198.51.100.129") in listed
        beside = ipaddress.ip_address("198.51.100.130")
        assert beside not in listed
        assert this_machine.is_this_machine(beside)
    assert not this_machine.is_this_machine(beside)
