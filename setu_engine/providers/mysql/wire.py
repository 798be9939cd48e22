"""What the connector's asyncmy session refuses of a hostile server: a
packet past a size limit, and a request for the password in clear text.

In the cloud the MySQL server at the other end of a connection is a
tenant's choice, so it may be hostile. Two things asyncmy does as any
server asks (asyncmy/connection.pyx):

- `read_packet` joins a payload split into 16 MB wire packets with no
  limit: one server could send a single endless packet and grow the
  worker's memory until it dies. `GuardedConnection.read_packet` looks at
  each wire packet's header before its payload is awaited and refuses the
  packet (a PacketTooLarge, the session closed) once the payload would
  pass MAX_PACKET_BYTES: at most that much of one packet is ever held.
  Packets below 16 MB and under the limit go to asyncmy's own reader
  unchanged, as does every row its bulk parser takes from the buffer
  (which parses complete packets under 16 MB only).
- its receive side reads the socket as fast as data comes, whether or not
  anything reads the rows: a streamed read whose consumer (a load) waits
  holds everything the server sends meanwhile, a whole table or, from a
  hostile server, without end. BoundedProtocol (installed in place of
  asyncmy's protocol class) stops reading the socket once RECEIVE_HIGH
  bytes wait unread, and reads on when the reader next wants bytes, so
  TCP's own flow control holds the server back.
- the `mysql_clear_password` and `dialog` (PAM) auth plugins are answered
  with the password in plain text, TLS or not. `auth_plugins()` maps both
  to a handler that refuses (ClearTextRefused) unless the session's TLS
  verifies the server (ssl verify-ca or verify-full) or the server is a
  Unix socket (nothing crosses a network). asyncmy consults the map
  before its own handling of either plugin.

The limit is the operator's (SETU_MYSQL_MAX_PACKET_BYTES in the runtime's
environment, default 64 MiB, MySQL 8's default max_allowed_packet), never
a connection's config.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import asyncmy.connection  # type: ignore[import-untyped,unused-ignore]
from asyncmy import errors  # type: ignore[import-untyped,unused-ignore]
from asyncmy.protocol import MysqlPacket  # type: ignore[import-untyped,unused-ignore]

from setu_engine.errors import ConfigError, PermanentError

LIMIT_SETTING = "SETU_MYSQL_MAX_PACKET_BYTES"
DEFAULT_MAX_PACKET_BYTES = 64 * 1024 * 1024
# A wire packet's payload is at most 2**24 - 1 bytes; one of exactly that
# size says another packet continues the payload.
WIRE_MAX = 2**24 - 1
# Unread bytes past which a session stops reading its socket (unless the
# reader waits for a longer packet): a session holds at most about this
# much besides the packet being read.
RECEIVE_HIGH = 8 * 1024 * 1024
# TLS modes that check who the server is: only then may a password go as is.
VERIFIED = frozenset({"verify-ca", "verify-full"})


def _limit_from(environ: Any) -> int:
    """The limit the runtime's environment sets. A value that is not one is
    a ConfigError naming the setting, met by every mysql connection (the
    provider's import fails), not a limit silently replaced."""
    raw = str(environ.get(LIMIT_SETTING, "") or "").strip()
    if not raw:
        return DEFAULT_MAX_PACKET_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(
            f"{LIMIT_SETTING}: {raw!r} is not a number of bytes (the runtime's setting)"
        ) from None
    if value < 1024 * 1024:
        raise ConfigError(f"{LIMIT_SETTING}: {value} is below 1 MiB (1048576)")
    return value


# Read once, at import: the runtime's environment is the operator's.
MAX_PACKET_BYTES = _limit_from(os.environ)


class PacketTooLarge(PermanentError):
    """A server sent one packet (a row, a message) past the runtime's limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"mysql: the server sent a packet larger than this runtime's limit of {limit} "
            f"bytes ({LIMIT_SETTING}); the session was closed. A row that large needs the "
            "operator to raise the limit; or leave its widest column out of the stream"
        )
        self.limit = limit


class ClearTextRefused(PermanentError):
    """A server asked for the password in clear text over a session whose
    TLS does not verify it."""

    def __init__(self, plugin: str) -> None:
        super().__init__(
            f"mysql: the server asked for the password in clear text (auth plugin {plugin}); "
            "nothing was sent. Use ssl: verify-ca or verify-full, so the password goes only "
            "to a server whose certificate checks out",
            fields=("config.ssl",),
        )


class BoundedProtocol(asyncmy.connection._MySQLProtocol):  # type: ignore[misc,name-defined,unused-ignore]
    """asyncmy's receive protocol, with flow control: reading pauses while
    RECEIVE_HIGH bytes or more wait unread and no reader wants more."""

    high = RECEIVE_HIGH

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._need = 0
        self._reading_paused = False
        # Set while reading is paused (tests wait on it).
        self.paused = asyncio.Event()

    def buffer_updated(self, nbytes: int) -> None:
        super().buffer_updated(nbytes)
        held = self.length - self.pos
        if not self._reading_paused and held >= self.high and held >= self._need:
            transport = self.transport
            if transport is not None:
                transport.pause_reading()
                self._reading_paused = True
                self.paused.set()

    async def wait_for_data(self, need: int) -> None:
        # Called only when fewer than `need` bytes are buffered: the reader
        # wants more, so the socket is read again.
        self._need = need
        if self._reading_paused:
            self._reading_paused = False
            self.paused.clear()
            if self.transport is not None:
                self.transport.resume_reading()
        try:
            await super().wait_for_data(need)
        finally:
            self._need = 0


_install_lock = threading.Lock()


def install_protocol() -> bool:
    """BoundedProtocol in place of asyncmy's protocol class (idempotent):
    Connection.connect builds its protocol by the module's global name, so
    the replacement takes effect; True when it did."""
    module: Any = asyncmy.connection
    with _install_lock:
        if getattr(module, "_MySQLProtocol", None) is not BoundedProtocol:
            setattr(module, "_MySQLProtocol", BoundedProtocol)  # noqa: B010 (a compiled module's global)
        return getattr(module, "_MySQLProtocol", None) is BoundedProtocol


class GuardedConnection(asyncmy.connection.Connection):
    """asyncmy's Connection with a limit on the size of one packet."""

    max_packet_bytes = MAX_PACKET_BYTES

    async def read_packet(self, packet_type: Any = MysqlPacket) -> Any:
        conn: Any = self  # asyncmy's stubs leave its Cython state out
        proto = conn._proto
        if proto.length - proto.pos < 4:
            await conn._fill_buffer(4)
        buffer, pos = proto.buffer, proto.pos
        size = buffer[pos] | (buffer[pos + 1] << 8) | (buffer[pos + 2] << 16)
        if size < WIRE_MAX and size <= self.max_packet_bytes:
            return await self._asyncmy_read(packet_type)
        return await self._read_long(packet_type)

    async def _asyncmy_read(self, packet_type: Any) -> Any:
        read: Any = super().read_packet
        return await read(packet_type)

    def abandon(self) -> None:
        """The session closed and its received bytes dropped: the stream is
        out of step, so whatever reads next (a cursor's close, a rollback)
        meets a lost connection, not the rest of the refused packet."""
        self.close()
        proto = getattr(self, "_proto")  # noqa: B009 (not in asyncmy's stubs)
        proto.buffer = bytearray()
        proto.length = proto.pos = 0
        proto.eof = True

    async def _read_long(self, packet_type: Any) -> Any:
        """asyncmy's loop over continued wire packets, each header checked
        against the limit before its payload is awaited."""
        conn: Any = self
        proto = conn._proto
        parts: list[bytes] = []
        total = 0
        while True:
            if proto.length - proto.pos < 4:
                await conn._fill_buffer(4)
            buffer, pos = proto.buffer, proto.pos
            size = buffer[pos] | (buffer[pos + 1] << 8) | (buffer[pos + 2] << 16)
            if buffer[pos + 3] != conn._next_seq_id:
                if not parts:
                    # asyncmy's reader raises the right error for it.
                    return await self._asyncmy_read(packet_type)
                raise errors.InternalError(
                    f"Packet sequence number wrong - got {buffer[pos + 3]} "
                    f"expected {conn._next_seq_id}"
                )
            total += size
            if total > self.max_packet_bytes:
                self.abandon()
                raise PacketTooLarge(self.max_packet_bytes)
            proto.pos = pos + 4
            conn._next_seq_id = (conn._next_seq_id + 1) & 0xFF
            if proto.length - proto.pos < size:
                await conn._fill_buffer(size)
            buffer, pos = proto.buffer, proto.pos
            parts.append(bytes(buffer[pos : pos + size]))
            proto.pos = pos + size
            if size < WIRE_MAX:
                break
        packet = packet_type(b"".join(parts), encoding=conn._encoding)
        if packet.is_error_packet():
            result = conn._result
            if result is not None and result.unbuffered_active is True:
                result.unbuffered_active = False
            packet.raise_for_error()
        return packet


class _RefuseClearText:
    """An auth plugin handler (asyncmy calls `authenticate` before its own
    code for the plugin) that answers nothing and fails the login."""

    plugin = ""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def authenticate(self, packet: Any) -> Any:
        # Closed so nothing more is read or written on this session.
        self.connection.close()
        raise ClearTextRefused(self.plugin)


class _RefuseMysqlClearPassword(_RefuseClearText):
    plugin = "mysql_clear_password"


class _RefuseDialog(_RefuseClearText):
    plugin = "dialog"


def auth_plugins(ssl_mode: str, *, socket: bool) -> dict[str, type]:
    """The auth_plugin_map for a session: the plain-text plugins refused
    unless TLS verifies the server or the server is a Unix socket."""
    if socket or ssl_mode in VERIFIED:
        return {}
    return {
        "mysql_clear_password": _RefuseMysqlClearPassword,
        "dialog": _RefuseDialog,
    }


async def connect(**kwargs: Any) -> Any:
    """asyncmy.connect with the guarded connection: the same keyword
    arguments, one GuardedConnection, connected."""
    install_protocol()
    factory: Any = GuardedConnection
    conn = factory(**kwargs)
    await conn.connect()
    return conn
