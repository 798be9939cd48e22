"""A hostile MySQL server on loopback against the `mysql` connector: one
packet past the runtime's limit, a request for the password in clear
text, rows the driver cannot decode. Each fails classified (a
PermanentError naming what to do), never a bare exception, an endless read
or a password sent.

The server is a fake written here (asyncio, on port 0): it speaks just
enough of the protocol (the v10 handshake, OK/EOF/ERR packets, text result
sets) for the connector to log in, set its session up and run one read,
and answers that read's query as the test asks.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from setu_engine.errors import ConfigError, PermanentError
from setu_engine.providers import get_provider
from setu_engine.providers.mysql import wire
from setu_engine.providers.mysql.failures import MalformedRow
from setu_engine.values.types import Column, Stream

PASSWORD = "s3cret-hunter2"
WIRE_MAX = 2**24 - 1
# Column types (MySQL's field types) and charsets the fake sends.
VAR_STRING, NEWDECIMAL, LONG = 253, 246, 3
UTF8MB4, BINARY = 45, 63

# client capabilities the fake offers: LONG_PASSWORD, CONNECT_WITH_DB,
# PROTOCOL_41, TRANSACTIONS, SECURE_CONNECTION, MULTI_RESULTS, PLUGIN_AUTH
CAPABILITIES = 0x1 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x20000 | 0x80000


def lenenc(data: bytes) -> bytes:
    assert len(data) < 251
    return bytes([len(data)]) + data


def ok_packet() -> bytes:
    return b"\x00\x00\x00" + struct.pack("<HH", 0x0002, 0)


def eof_packet() -> bytes:
    return b"\xfe" + struct.pack("<HH", 0, 0x0002)


def column_packet(name: str, kind: int, charset: int) -> bytes:
    names = b"".join(lenenc(x) for x in (b"def", b"db", b"t", b"t", name.encode(), name.encode()))
    return names + b"\x0c" + struct.pack("<HIBHB", charset, 255, kind, 0, 0) + b"\x00\x00"


def row_packet(*values: bytes) -> bytes:
    return b"".join(lenenc(v) for v in values)


@dataclass
class FakeServer:
    """One fake MySQL server: `auth` is "ok", "clear" or "dialog" (an
    auth switch to mysql_clear_password or dialog); `answer` writes the response to the read's
    query (any query naming `db`.`t`); `received` holds every byte any
    client sent."""

    answer: Callable[[FakeServer, asyncio.StreamWriter], Awaitable[None]]
    auth: str = "ok"
    greeting: bytes | None = None  # in place of the v10 handshake
    received: bytearray = field(default_factory=bytearray)
    sent_to_read: int = 0
    port: int = 0
    flooded: asyncio.Event = field(default_factory=asyncio.Event)

    def packet(self, writer: asyncio.StreamWriter, seq: int, payload: bytes) -> None:
        writer.write(struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload)

    async def read_packet(self, reader: asyncio.StreamReader) -> bytes:
        header = await reader.readexactly(4)
        payload = await reader.readexactly(int.from_bytes(header[:3], "little"))
        self.received += header + payload
        return payload

    def handshake(self) -> bytes:
        salt = b"abcdefgh" + b"ijklmnopqrst"
        return (
            b"\x0a8.0.36-fake\x00"
            + struct.pack("<I", 7)
            + salt[:8]
            + b"\x00"
            + struct.pack("<HBHHB", CAPABILITIES & 0xFFFF, UTF8MB4, 2, CAPABILITIES >> 16, 21)
            + b"\x00" * 10
            + salt[8:]
            + b"\x00mysql_native_password\x00"
        )

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.packet(writer, 0, self.greeting or self.handshake())
            await self.read_packet(reader)  # the handshake response
            if self.auth != "ok":
                # An auth switch to a plugin that takes the password as is
                # (dialog's data: a flag byte, then the prompt).
                switch = {
                    "clear": b"mysql_clear_password\x00",
                    "dialog": b"dialog\x00\x04Password: ",
                }
                self.packet(writer, 2, b"\xfe" + switch[self.auth])
                await self.read_packet(reader)  # what a client that complies sends
                self.packet(writer, 4, b"\xff" + struct.pack("<H", 1045) + b"#28000denied")
                await writer.drain()
                await reader.read()  # until the client hangs up
                return
            self.packet(writer, 2, ok_packet())
            while True:
                query = await self.read_packet(reader)
                if query[:1] == b"\x01":  # COM_QUIT
                    return
                text = query[1:].decode("utf-8", "replace")
                if text.startswith("SELECT VERSION()"):
                    self.packet(writer, 1, b"\x02")
                    self.packet(writer, 2, column_packet("v", VAR_STRING, UTF8MB4))
                    self.packet(writer, 3, column_packet("i", LONG, BINARY))
                    self.packet(writer, 4, eof_packet())
                    self.packet(writer, 5, row_packet(b"8.0.36-fake", b"0"))
                    self.packet(writer, 6, eof_packet())
                elif "`db`.`t`" in text:
                    await self.answer(self, writer)
                else:
                    self.packet(writer, 1, ok_packet())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@asynccontextmanager
async def fake_server(
    answer: Callable[[FakeServer, asyncio.StreamWriter], Awaitable[None]],
    auth: str = "ok",
    greeting: bytes | None = None,
) -> AsyncIterator[FakeServer]:
    fake = FakeServer(answer, auth, greeting)
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    fake.port = server.sockets[0].getsockname()[1]
    try:
        yield fake
    finally:
        server.close()
        await server.wait_closed()


def config(fake: FakeServer, **overrides: Any) -> dict[str, Any]:
    return {
        "host": "127.0.0.1",
        "port": fake.port,
        "database": "db",
        "user": "tenant",
        "password": PASSWORD,
        "ssl": "disable",
        "connect_timeout": 5,
    } | overrides


def stream(*columns: Column) -> Stream:
    kinds = ["plain"] * len(columns)
    return Stream(name="t", namespace="db", columns=columns, locator={"table": "t", "kinds": kinds})


async def preview(fake: FakeServer, target: Stream) -> Any:
    connector = await get_provider("mysql").connect(config(fake))
    try:
        return await connector.preview(target, 10)
    finally:
        await connector.close()


def result_header(server: FakeServer, writer: asyncio.StreamWriter, *columns: bytes) -> int:
    """A result set's column count, definitions and EOF; the next seq id."""
    server.packet(writer, 1, bytes([len(columns)]))
    for seq, column in enumerate(columns, 2):
        server.packet(writer, seq, column)
    server.packet(writer, 2 + len(columns), eof_packet())
    return 3 + len(columns)


# -- 1. one packet past the limit


async def endless_row(server: FakeServer, writer: asyncio.StreamWriter) -> None:
    """A row continued over wire packets of 16 MB (six, 96 MB: a client
    without a limit takes it all and reads the row)."""
    seq = result_header(server, writer, column_packet("blob", VAR_STRING, BINARY))
    chunk = b"\x00" * WIRE_MAX
    # The row's one field: a length (0xfe, 8 bytes) then its bytes.
    body = 6 * WIRE_MAX + 100
    first = b"\xfe" + struct.pack("<Q", body - 9) + chunk[9:]
    pieces = [first] + [chunk] * 5 + [b"\x00" * 100]
    for piece in pieces:
        server.packet(writer, seq & 0xFF, piece)
        seq += 1
        await writer.drain()
        server.sent_to_read += len(piece)
    server.packet(writer, seq & 0xFF, eof_packet())


async def test_a_packet_past_the_limit_fails_classified_and_is_not_read_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limit = 20 * 1024 * 1024  # the operator's setting: above one wire packet
    monkeypatch.setattr(wire.GuardedConnection, "max_packet_bytes", limit)
    async with fake_server(endless_row) as fake:
        with pytest.raises(wire.PacketTooLarge) as caught:
            await preview(fake, stream(Column("blob", "bytes")))
    assert isinstance(caught.value, PermanentError)
    assert str(limit) in str(caught.value) and wire.LIMIT_SETTING in str(caught.value)
    # The client hung up in the second wire packet: the rest was never sent.
    assert fake.sent_to_read < 6 * WIRE_MAX


async def one_big_packet(server: FakeServer, writer: asyncio.StreamWriter) -> None:
    """One wire packet of 2 MiB (under 16 MB: no continuation)."""
    seq = result_header(server, writer, column_packet("blob", VAR_STRING, BINARY))
    size = 2 * 1024 * 1024
    server.packet(writer, seq, b"\xfd" + (size - 4).to_bytes(3, "little") + b"\x00" * (size - 4))
    server.packet(writer, seq + 1, eof_packet())


async def test_one_wire_packet_past_a_lower_limit_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wire.GuardedConnection, "max_packet_bytes", 1024 * 1024)
    async with fake_server(one_big_packet) as fake:
        with pytest.raises(wire.PacketTooLarge, match="1048576 bytes"):
            await preview(fake, stream(Column("blob", "bytes")))


async def test_rows_under_the_limit_read_as_before() -> None:
    async def rows(server: FakeServer, writer: asyncio.StreamWriter) -> None:
        seq = result_header(server, writer, column_packet("name", VAR_STRING, UTF8MB4))
        server.packet(writer, seq, row_packet("añil".encode()))
        server.packet(writer, seq + 1, eof_packet())

    async with fake_server(rows) as fake:
        batch = await preview(fake, stream(Column("name", "text")))
    assert batch == [("añil",)]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("", wire.DEFAULT_MAX_PACKET_BYTES), ("33554432", 32 * 1024 * 1024)],
)
def test_the_limit_is_the_runtimes_setting(raw: str, expected: int) -> None:
    assert wire._limit_from({wire.LIMIT_SETTING: raw}) == expected


@pytest.mark.parametrize("raw", ["64MB", "1000"])
def test_a_limit_setting_that_is_not_a_size_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match=wire.LIMIT_SETTING):
        wire._limit_from({wire.LIMIT_SETTING: raw})


# -- 2. the password in clear text


async def never_read(server: FakeServer, writer: asyncio.StreamWriter) -> None:
    raise AssertionError("no query after a refused login")


@pytest.mark.parametrize(
    ("ssl", "plugin"), [("disable", "clear"), ("prefer", "clear"), ("disable", "dialog")]
)
async def test_a_request_for_the_clear_text_password_is_refused(ssl: str, plugin: str) -> None:
    async with fake_server(never_read, auth=plugin) as fake:
        with pytest.raises(wire.ClearTextRefused) as caught:
            await get_provider("mysql").connect(config(fake, ssl=ssl))
    assert isinstance(caught.value, PermanentError)
    assert "verify-ca or verify-full" in str(caught.value)
    assert caught.value.fields == ("config.ssl",)
    assert PASSWORD.encode() not in fake.received


def test_clear_text_plugins_are_allowed_only_over_verified_tls_or_a_socket() -> None:
    for mode in ("disable", "prefer", "require"):
        assert set(wire.auth_plugins(mode, socket=False)) == {"mysql_clear_password", "dialog"}
    for mode in ("verify-ca", "verify-full"):
        assert wire.auth_plugins(mode, socket=False) == {}
    assert wire.auth_plugins("disable", socket=True) == {}


# -- 3. rows the driver cannot decode


def bad_row(kind: int, charset: int, value: bytes) -> Callable[..., Awaitable[None]]:
    async def answer(server: FakeServer, writer: asyncio.StreamWriter) -> None:
        seq = result_header(
            server,
            writer,
            column_packet("id", LONG, BINARY),
            column_packet("bad", kind, charset),
        )
        server.packet(writer, seq, row_packet(b"1", value))
        server.packet(writer, seq + 1, eof_packet())

    return answer


@pytest.mark.parametrize(
    ("answer", "column", "error"),
    [
        (bad_row(VAR_STRING, UTF8MB4, b"\xff\xfe"), Column("bad", "text"), "UnicodeDecodeError"),
        (bad_row(NEWDECIMAL, BINARY, b"1.2.3"), Column("bad", "numeric"), "InvalidOperation"),
        (bad_row(LONG, BINARY, b"x1"), Column("bad", "integer"), "ValueError"),
    ],
    ids=["text-not-utf8", "decimal", "integer"],
)
async def test_a_row_the_driver_cannot_decode_is_a_permanent_error_naming_the_column(
    answer: Callable[..., Awaitable[None]], column: Column, error: str
) -> None:
    # The key column is a bytes column: only `bad` can raise each error.
    async with fake_server(answer) as fake:
        with pytest.raises(MalformedRow) as caught:
            await preview(fake, stream(Column("id", "bytes"), column))
    assert isinstance(caught.value, PermanentError)
    message = str(caught.value)
    assert "stream 't'" in message and "column 'bad'" in message and error in message


async def test_a_streamed_read_meeting_a_row_it_cannot_decode_fails_classified() -> None:
    # No primary key: one streamed query (a server-side cursor), whose end
    # (the cursor drained, the snapshot rolled back) runs on the session
    # the bad row left out of step.
    async with fake_server(bad_row(VAR_STRING, UTF8MB4, b"\xc3")) as fake:
        connector = await get_provider("mysql").connect(config(fake))
        try:
            with pytest.raises(MalformedRow, match="column 'bad'"):
                async for _ in connector.read(
                    stream(Column("id", "bytes"), Column("bad", "text")), 100
                ):
                    pass
        finally:
            await connector.close()


# -- 1b. a server that sends while nobody reads

FLOOD_ROWS = 400_000  # 400k rows of 200 bytes: 80 MB, ten times the high mark


async def flood(server: FakeServer, writer: asyncio.StreamWriter) -> None:
    seq = result_header(server, writer, column_packet("name", VAR_STRING, UTF8MB4))
    payload = row_packet(b"x" * 200)
    for number in range(FLOOD_ROWS):
        server.packet(writer, seq & 0xFF, payload)
        seq += 1
        if number % 1000 == 0:
            await writer.drain()
    server.packet(writer, seq & 0xFF, eof_packet())
    await writer.drain()
    server.flooded.set()


async def test_a_streamed_read_holds_a_bounded_amount_while_its_consumer_waits() -> None:
    # The read's first batch is taken, then nothing reads: the session
    # stops reading its socket at the high mark, and the server, held back
    # by TCP, cannot finish sending (a session without flow control takes
    # all 80 MB in, and the server finishes).
    async with fake_server(flood) as fake:
        connector: Any = await get_provider("mysql").connect(config(fake))
        try:
            reads = connector.read(stream(Column("name", "text")), 10)
            first = await anext(reads)
            assert first[0] == ("x" * 200,)
            proto = connector.conn._proto
            assert isinstance(proto, wire.BoundedProtocol)
            paused = asyncio.ensure_future(proto.paused.wait())
            flooded = asyncio.ensure_future(fake.flooded.wait())
            done, _ = await asyncio.wait({paused, flooded}, return_when=asyncio.FIRST_COMPLETED)
            flooded.cancel()
            paused.cancel()
            assert paused in done and not fake.flooded.is_set()
            assert proto.length - proto.pos < 2 * wire.RECEIVE_HIGH
            # Reading on takes every row: nothing was lost to the pauses.
            count = len(first) + sum([len(batch) async for batch in reads])
            assert count == FLOOD_ROWS
        finally:
            await connector.close()


def test_the_server_hands_the_limit_to_its_own_cloud_workers() -> None:
    from setu_server.worker.supervisor import worker_environment

    env = worker_environment({}, {wire.LIMIT_SETTING: "33554432", "PGPASSWORD": "x"})
    assert env == {wire.LIMIT_SETTING: "33554432"}


async def test_a_packet_too_short_for_its_fields_is_a_permanent_error() -> None:
    async def short_error(server: FakeServer, writer: asyncio.StreamWriter) -> None:
        server.packet(writer, 1, b"\xff")  # an ERR packet without its code

    async with fake_server(short_error) as fake:
        with pytest.raises(MalformedRow, match="stream 't': the server sent a packet too short"):
            await preview(fake, stream(Column("name", "text")))


@pytest.mark.parametrize(
    "greeting",
    [b"\x0a", b"\x0a8.0\x00\x01\x00\x00\x00abcdefgh\x00\xff", b"\x0a\xff\xfe\x00" + bytes(40)],
    ids=["one-byte", "cut-in-capabilities", "version-not-a-number"],
)
async def test_a_greeting_that_does_not_parse_fails_the_connect_classified(greeting: bytes) -> None:
    async with fake_server(never_read, greeting=greeting) as fake:
        with pytest.raises(PermanentError, match="handshake does not parse") as caught:
            await get_provider("mysql").connect(config(fake))
    assert caught.value.fields == ("config.host", "config.port")
