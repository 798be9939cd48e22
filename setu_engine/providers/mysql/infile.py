"""A guard on asyncmy's LOAD DATA LOCAL: the client sends only a file Setu
registered for that connection, for the duration of its own LOAD statement.

With `local_infile=True`, asyncmy answers a server's LOCAL INFILE request
with whatever client file the server names, in answer to any query
(`LoadLocalFile` in asyncmy/connection.pyx, built by
`_read_load_local_packet`). In the cloud the server is a tenant's, so a
hostile server could ask for Setu's own files (its config, credentials,
the host's /etc). `install_guard()` replaces that module global with a
sender that sends a file only when the server names exactly the path
registered, by `allow()`, for that very connection; anything else is
refused: nothing of the file is sent (an empty upload ends the server's
request, so the protocol stays in step) and the statement fails.

The connector turns local_infile on only when `install_guard()` answered
True, which it does only after checking that the compiled module now
holds the guard (a Cython module reads its globals from the module's
dict, so replacing the attribute takes effect; the check makes sure).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from setu_engine.errors import PermanentError

# id(connection) -> (a weak reference to it, the one path it may send).
_allowed: dict[int, tuple[weakref.ref[Any], bytes]] = {}
_lock = threading.Lock()
_installed = False


class RefusedFile(PermanentError):
    """A server asked for a local file Setu did not register for it: a
    PermanentError, so a read (which classifies only the driver's errors)
    fails classified too, whichever query the server answered so."""


def _registered(connection: Any, filename: bytes) -> bool:
    with _lock:
        entry = _allowed.get(id(connection))
    if entry is None:
        return False
    ref, path = entry
    return ref() is connection and filename == path


class GuardedLoadLocalFile:
    """Stands in for asyncmy's LoadLocalFile: sends a file only when it is
    the one registered for the connection, else nothing. (asyncmy's own
    class refuses the bytes file name its packet parser gives, so LOAD
    DATA LOCAL does not work through it at all: this one decodes it.)"""

    def __init__(self, filename: bytes | str, connection: Any) -> None:
        self.raw = filename if isinstance(filename, bytes) else os.fsencode(filename)
        self.connection = connection

    async def send_data(self) -> None:
        conn = self.connection
        try:
            if not _registered(conn, self.raw):
                raise RefusedFile(
                    f"mysql: the server asked for the local file {self.raw!r}, which Setu did "
                    "not offer; nothing was sent (LOAD DATA LOCAL is answered only for "
                    "Setu's own loads)"
                )
            size = min(int(conn._max_allowed_packet), 16 * 1024)
            with open(os.fsdecode(self.raw), "rb") as source:  # noqa: ASYNC230 (16 KB reads)
                while chunk := source.read(size):
                    conn.write_packet(chunk)
                    await conn._proto.drain()
        finally:
            # An empty packet ends the upload (after nothing, when refused),
            # so the protocol stays in step.
            conn.write_packet(b"")
            await conn._proto.drain()


def install_guard() -> bool:
    """Installs the guard (idempotent); False when asyncmy is missing or its
    sender could not be replaced, in which case local_infile must stay off."""
    global _installed
    with _lock:
        if _installed:
            return True
        try:
            import asyncmy.connection as module  # type: ignore[import-untyped,unused-ignore]
        except ImportError:
            return False
        if not isinstance(getattr(module, "LoadLocalFile", None), type):
            return False
        guarded = GuardedLoadLocalFile
        setattr(module, "LoadLocalFile", guarded)  # noqa: B010 (a compiled module's global)
        _installed = getattr(module, "LoadLocalFile", None) is guarded
        return _installed


def guard_installed() -> bool:
    return _installed


@contextmanager
def allow(conn: Any, path: str) -> Iterator[None]:
    """Lets `conn` send exactly `path` while the block runs."""
    key = id(conn)
    with _lock:
        _allowed[key] = (weakref.ref(conn), path.encode())
    try:
        yield
    finally:
        with _lock:
            _allowed.pop(key, None)
