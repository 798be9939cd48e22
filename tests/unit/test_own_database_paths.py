"""Setu's own database is refused by every path a cloud connection could
take to it: its port at every address of this machine (both families, as
the machine's addresses are now), its Unix socket folders by whatever path,
link or hard link, whatever the files root (setu_engine/support/egress.py,
setu_engine/support/this_machine.py, setu_agent/cloud/policy.py), and the
server names all of it from its database URL (setu_server/worker/endpoints.py)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from setu_agent.cloud.policy import CloudPolicy, cloud_egress
from setu_engine.errors import ConfigError, ProviderError
from setu_engine.providers.postgres import PROVIDER as POSTGRES
from setu_engine.support import this_machine
from setu_engine.support.egress import AddressPolicy, parse_networks
from setu_server.worker.endpoints import DEFAULT_SOCKET_FOLDERS, own_database

EVERYWHERE = parse_networks("0.0.0.0/0, ::/0", "test")
NOT_HERE = "203.0.113.77"  # documentation range, on no machine's interface


def spellings(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[str]:
    """The address, and for IPv4 its mapped and NAT64 IPv6 forms."""
    if address.version == 6:
        return [str(address)]
    return [str(address), f"::ffff:{address}", f"64:ff9b::{address}"]


def test_every_interface_address_and_loopback_spelling_is_this_machine() -> None:
    found = this_machine.addresses()
    assert ipaddress.ip_address("127.0.0.1") in found
    for address in found:
        assert this_machine.is_this_machine(address), address
    for text in ("127.0.0.1", "127.9.9.9", "0.0.0.0", "::1", "::"):
        assert this_machine.is_this_machine(ipaddress.ip_address(text)), text
    assert not this_machine.is_this_machine(ipaddress.ip_address(NOT_HERE))


async def test_the_database_port_is_refused_at_every_address_of_this_machine() -> None:
    policy = AddressPolicy(allow=EVERYWHERE, local_ports=frozenset({5432}))
    for address in this_machine.addresses():
        if address.is_link_local:
            continue  # no TCP connection without a scope
        for host in spellings(address):
            with pytest.raises(
                ConfigError, match=r"config\.host: resolves to the address of Setu's own database"
            ):
                await policy.address(host, 5432, "config.host")
            # The machine's other services stay as reachable as allowed.
            assert await policy.address(host, 5433, "config.host")
    assert await policy.address(NOT_HERE, 5432, "config.host") == NOT_HERE


@contextlib.contextmanager
def listening_socket(folder: Path) -> Iterator[Path]:
    """`folder` with a listening Unix socket named as PostgreSQL names one."""
    folder.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(folder / ".s.PGSQL.5432"))
        listener.listen()
        yield folder


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder with a short path: a socket's path holds at most 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="setu-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.fixture
def own_socket(short_tmp: Path) -> Iterator[Path]:
    with listening_socket(short_tmp / "pgdata") as folder:
        yield folder


def test_the_socket_folder_is_refused_by_every_path_and_link(
    own_socket: Path, tmp_path: Path
) -> None:
    policy = AddressPolicy(socket_folders=(str(own_socket),))
    (tmp_path / "link").symlink_to(own_socket, target_is_directory=True)
    (tmp_path / "socket-link").symlink_to(own_socket / ".s.PGSQL.5432")
    (tmp_path / "elsewhere").mkdir()
    os.link(own_socket / ".s.PGSQL.5432", tmp_path / "elsewhere" / ".s.PGSQL.6000")
    paths = [
        (str(own_socket), 5432),
        (f"{own_socket}/", 5432),
        (str(own_socket), 7777),  # the folder, whatever the port
        (f"{own_socket}/../pgdata", 5432),
        (str(tmp_path / "link"), 5432),
        (str(own_socket / ".s.PGSQL.5432"), 1),
        (str(tmp_path / "socket-link"), 5432),  # a link to the socket itself
        (str(tmp_path / "elsewhere"), 6000),  # a hard link to it
    ]
    for path, port in paths:
        with pytest.raises(
            ConfigError, match=r"config\.host: names the socket folder of Setu's own database"
        ):
            policy.check_socket(path, port, "config.host")
    # Another folder's socket is another server.
    policy.check_socket(str(tmp_path), 5432, "config.host")


@pytest.mark.parametrize("shared", [True, False])
def test_a_cloud_postgres_socket_host_is_checked_whatever_the_files_root(
    short_tmp: Path, shared: bool
) -> None:
    # A root of / confines nothing; a workspace folder could hold the
    # database's sockets (an operator's mistake): refused either way.
    workspace = "0b6f3a1e-0000-4000-8000-00000000000a"
    folder = short_tmp / "files" / workspace / "pg"
    with listening_socket(folder):
        egress = cloud_egress("", [], [5432], [str(folder)])
        root = Path("/") if shared else short_tmp / "files"
        policy = CloudPolicy(root, egress).for_workspace(workspace)
        host = str(folder)
        with pytest.raises(ConfigError, match=r"config\.host: names the socket folder of Setu's"):
            policy("postgres", {"host": host, "database": "setu", "user": "postgres"})
        with pytest.raises(ConfigError, match=r"config\.host: empty"):
            policy("postgres", {"host": " ", "database": "setu", "user": "postgres"})
        # Another folder's socket passes the same policy.
        with listening_socket(folder.parent / "other"):
            other = {"host": str(folder.parent / "other"), "database": "d", "user": "u"}
            assert policy("postgres", other) == other


def test_an_embedded_database_is_named_by_its_socket_folder_and_port(tmp_path: Path) -> None:
    url = f"postgresql://postgres:@/setu?host={tmp_path}"
    own = own_database(url, {"port": "5432", "unix_socket_directories": str(tmp_path)})
    assert own.local_ports == (5432,)
    assert own.socket_folders == (str(tmp_path.resolve()),)
    assert own.tcp == ()
    endpoints = own.endpoints()
    for address in this_machine.addresses():
        host = f"[{address}]" if address.version == 6 else str(address)
        assert f"{host}:5432" in endpoints


def test_a_database_on_loopback_protects_its_own_and_its_reported_port_and_folders() -> None:
    own = own_database(
        "postgresql://u@127.0.0.1:6543/db",
        {"port": "5432", "unix_socket_directories": '/var/run/postgresql, "/tmp/pg"'},
    )
    assert own.tcp == ("127.0.0.1:6543",)
    assert own.local_ports == (6543, 5432)
    assert own.socket_folders == ("/var/run/postgresql", "/tmp/pg")
    # Folders PostgreSQL keeps to itself: the usual ones.
    hidden = own_database("postgresql://u@localhost/db", {"port": "5432"})
    assert hidden.socket_folders == DEFAULT_SOCKET_FOLDERS


def test_a_remote_database_is_named_by_its_endpoints_only() -> None:
    own = own_database(f"postgresql://u@{NOT_HERE}:5433/db", {"port": "5433"})
    assert (own.tcp, own.local_ports, own.socket_folders) == ((f"{NOT_HERE}:5433",), (), ())
    assert own.endpoints() == [f"{NOT_HERE}:5433"]


def test_a_url_without_a_host_is_where_the_driver_would_look(tmp_path: Path) -> None:
    via_pghost = own_database("postgresql:///db", {}, env={"PGHOST": str(tmp_path)})
    assert via_pghost.socket_folders[0] == str(tmp_path.resolve())
    defaults = own_database("postgresql:///db", {}, env={})
    assert set(DEFAULT_SOCKET_FOLDERS) <= set(defaults.socket_folders)
    assert defaults.local_ports == (5432,)


async def test_an_empty_host_is_refused_rather_than_left_to_the_driver() -> None:
    # asyncpg would take PGHOST, then /run/postgresql, /tmp…: this machine.
    for host in ("", "  "):
        with pytest.raises(ConfigError, match=r"config\.host: empty"):
            await POSTGRES.connect({"host": host, "database": "d", "user": "u"})


async def test_a_host_list_is_one_path_to_the_driver_never_a_way_around_the_check(
    own_socket: Path,
) -> None:
    # libpq would split `a,b` into two hosts and try the second; asyncpg
    # takes a `host` argument whole, so the checked path is the one opened.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.bind(str(own_socket / ".s.PGSQL.5433"))
        probe.listen()
        probe.setblocking(False)
        config = {"host": f"/nowhere,{own_socket}", "port": 5433, "database": "d", "user": "u"}
        with pytest.raises(ProviderError, match="cannot connect"):
            await POSTGRES.connect(config | {"connect_timeout": 2})
        with pytest.raises(BlockingIOError):
            probe.accept()  # nothing knocked


def test_the_listen_url_past_a_pooler_is_refused_too() -> None:
    # The main URL names the pooler; LISTEN goes to PostgreSQL itself, which
    # a tenant on an allowed network must not reach either.
    pooler, postgres = "198.51.100.7:6432", f"{NOT_HERE}:5432"
    own = own_database(
        f"postgresql://u@{pooler}/db", {"port": "5432"}, also=[f"postgresql://u@{postgres}/db"]
    )
    assert own.endpoints() == [pooler, postgres]
    same = own_database(f"postgresql://u@{pooler}/db", {}, also=[f"postgresql://u@{pooler}/db"])
    assert same.endpoints() == [pooler]
