"""A tenant's cloud connection reaches only what the egress policy allows,
checked by resolved address, and takes no credential from the server's
environment (setu_engine/support/egress.py, setu_agent/cloud/policy.py)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest

from setu_client import SetuClient
from setu_engine.errors import ProviderError
from setu_engine.providers.postgres import PROVIDER as POSTGRES
from tests.factories import Tenant, make_tenant
from tests.s3server import S3Endpoint
from tests.servers import in_process

AMBIENT_PASSWORD = "ambient-server-password-7f3a"
SSL_REQUEST = 80877103


@dataclass
class FakePostgres:
    """A PostgreSQL look-alike on loopback that asks for a cleartext
    password and records what each client sends."""

    port: int = 0
    startups: list[bytes] = field(default_factory=list)
    passwords: list[bytes] = field(default_factory=list)
    received: bytearray = field(default_factory=bytearray)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                length, code = struct.unpack("!ii", await reader.readexactly(8))
                if code != SSL_REQUEST:
                    break
                writer.write(b"N")  # no TLS here
            startup = await reader.readexactly(length - 8)
            self.received += startup
            self.startups.append(startup)
            writer.write(b"R" + struct.pack("!ii", 8, 3))  # cleartext password, please
            kind = await reader.readexactly(1)
            (size,) = struct.unpack("!i", await reader.readexactly(4))
            body = await reader.readexactly(size - 4)
            self.received += body
            if kind == b"p":
                self.passwords.append(body.rstrip(b"\0"))
            error = b"SFATAL\0C28P01\0Mpassword authentication failed\0\0"
            writer.write(b"E" + struct.pack("!i", len(error) + 4) + error)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def fake_postgres() -> AsyncIterator[FakePostgres]:
    fake = FakePostgres()
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    fake.port = server.sockets[0].getsockname()[1]
    async with server:
        yield fake


@pytest.fixture
async def tenant(pool: asyncpg.Pool) -> Tenant:
    return await make_tenant(pool)


@contextlib.asynccontextmanager
async def client_on(
    database_url: str, tenant: Tenant, tmp_path: Path, **settings: object
) -> AsyncIterator[SetuClient]:
    settings = {"local_files_root": str(tmp_path / "files"), "cloud_allow_networks": ""} | settings
    async with (
        in_process(database_url, data_dir=tmp_path / "server", **settings) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        yield client


async def _refusal(
    client: SetuClient, config: dict[str, object], provider: str = "postgres"
) -> str:
    connection = await client.create_connection(f"c-{len(str(config))}", provider, config)
    answer = await client.test_connection(connection.id)
    await client.delete_connection(connection.id)
    assert not answer.ok
    return answer.message


async def test_every_spelling_of_this_machine_is_refused_by_address(
    database_url: str, tenant: Tenant, tmp_path: Path, fake_postgres: FakePostgres
) -> None:
    spellings = [
        "0.0.0.0",
        "0",
        "127.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "::ffff:127.0.0.1",
        "::1",
        "localhost",
        socket.gethostname(),
        "169.254.169.254",
        "10.0.0.1",
    ]
    async with client_on(database_url, tenant, tmp_path) as client:
        for host in spellings:
            config = {"host": host, "port": fake_postgres.port, "database": "d", "user": "u"}
            message = await _refusal(client, config)
            assert "config.host: resolves to" in message, (host, message)
            assert "may not reach" in message
    assert fake_postgres.startups == []  # not one packet reached the listener


async def test_a_cloud_s3_endpoint_on_loopback_is_refused(
    database_url: str, tenant: Tenant, tmp_path: Path, s3_endpoint: S3Endpoint
) -> None:
    secrets = tmp_path / "secrets.json"
    secrets.write_text('{"S3_SECRET": "testing"}')
    async with client_on(
        database_url, tenant, tmp_path, secrets_file=str(secrets), shared_secrets="S3_SECRET"
    ) as client:
        config = {
            "url": "s3://anything/",
            "format": "csv",
            "endpoint_url": s3_endpoint.endpoint_url,
            "access_key_id": "testing",
            "secret_access_key": {"$secret": "S3_SECRET"},
        }
        message = await _refusal(client, config, provider="file")
        assert "config.endpoint_url: resolves to a loopback address" in message


async def test_an_allowed_network_is_reached_and_no_ambient_password_is_sent(
    database_url: str,
    tenant: Tenant,
    tmp_path: Path,
    fake_postgres: FakePostgres,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"*:*:*:*:{AMBIENT_PASSWORD}\n")
    passfile.chmod(0o600)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".pgpass").write_text(f"*:*:*:*:{AMBIENT_PASSWORD}\n")
    (home / ".pgpass").chmod(0o600)
    monkeypatch.setenv("PGPASSWORD", AMBIENT_PASSWORD)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    monkeypatch.setenv("HOME", str(home))
    async with client_on(
        database_url, tenant, tmp_path, cloud_allow_networks="127.0.0.0/8"
    ) as client:
        config = {"host": "127.0.0.1", "port": fake_postgres.port, "database": "d", "user": "u"}
        message = await _refusal(client, config)
    assert "password authentication failed" in message
    assert fake_postgres.passwords == [b""]  # asked, and given nothing
    assert AMBIENT_PASSWORD.encode() not in fake_postgres.received


async def test_a_connection_goes_to_the_vetted_address_not_a_second_lookup(
    fake_postgres: FakePostgres,
) -> None:
    class Pinned:
        asked: list[str] = []

        async def address(self, host: str, port: int, field: str) -> str:
            self.asked.append(host)
            return "127.0.0.1"

    egress = Pinned()
    config = {"host": "db.invalid", "port": fake_postgres.port, "database": "d", "user": "u"}
    with pytest.raises(ProviderError, match="password authentication failed"):
        await POSTGRES.connect(config, egress)
    assert egress.asked == ["db.invalid"]  # a name that never resolves, reached anyway
    assert len(fake_postgres.startups) == 1


@contextlib.asynccontextmanager
async def tcp_front(url: str, everywhere: bool = False) -> AsyncIterator[int]:
    """A TCP port on loopback (`everywhere`: on every address of this
    machine, both families, as `listen_addresses = '*'`) that forwards to
    the PostgreSQL socket behind `url`."""
    parts = urlsplit(url)
    folder = parse_qs(parts.query)["host"][0]
    socket_path = f"{folder}/.s.PGSQL.{parts.port or 5432}"

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    if everywhere:
        listening = socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
        server = await asyncio.start_server(forward, sock=listening)
    else:
        server = await asyncio.start_server(forward, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def test_setus_own_database_is_refused_even_with_loopback_allowed(
    database_url: str, tenant: Tenant, tmp_path: Path
) -> None:
    async with tcp_front(database_url) as port:
        parts = urlsplit(database_url)
        name = parts.path.lstrip("/")
        over_tcp = f"postgresql://postgres@127.0.0.1:{port}/{name}"
        async with (
            in_process(
                over_tcp,
                data_dir=tmp_path / "server",
                local_files_root=str(tmp_path / "files"),
                cloud_allow_networks="127.0.0.0/8, ::1/128",
            ) as server,
            SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
        ):
            for host in ("127.0.0.1", "127.1", "0", "::ffff:127.0.0.1", "localhost"):
                config = {"host": host, "port": port, "database": name, "user": "postgres"}
                message = await _refusal(client, config)
                assert "Setu's own database" in message, (host, message)
            theft = await client.create_connection(
                "theft",
                "postgres",
                {"host": "127.1", "port": port, "database": name, "user": "postgres"},
            )
            with pytest.raises(Exception, match="Setu's own database"):
                await client.preview_stream(theft.id, "public.api_key")
