"""SQLite's errors (the standard library's sqlite3) as TransientError,
PermanentError or ConnectionClosed, by exception class and message
(docs/errors.md, "Task failures: permanent or transient"; the shape is
setu_engine/providers/failures.py's)."""

from __future__ import annotations

import sqlite3

from setu_engine.errors import ConnectionClosed, ProviderError, TransientError
from setu_engine.providers.failures import DUPLICATE_KEY, permanent

_SQLITE_TRANSIENT = ("database is locked", "database table is locked", "disk i/o error")
_SQLITE_PERMANENT = {
    "no such table": "the table does not exist: run discover to see what the file offers",
    "no such column": (
        "the table's columns do not match the stream's: add the column(s) or leave "
        "them out of the spec"
    ),
    "has no column named": (
        "the table's columns do not match the stream's: add the column(s) or leave "
        "them out of the spec"
    ),
    "unable to open database file": "check config.path and its folder's permissions",
    "readonly database": "the file is read-only: make it writable for this runtime",
    "file is not a database": "config.path is not an SQLite database: check the path",
}
# sqlite3's words for a call on a connection (or cursor) closed under it.
_SQLITE_CLOSED = "cannot operate on a closed"
_SQLITE_UNIQUE = DUPLICATE_KEY


def sqlite_error(exc: sqlite3.Error, what: str) -> ProviderError:
    message = f"{what}: {exc}"
    text = str(exc).lower()
    if isinstance(exc, sqlite3.ProgrammingError) and _SQLITE_CLOSED in text:
        # Our own close, not a value that does not fit (a ProgrammingError too).
        return ConnectionClosed(f"{what}: the connection was closed (the task is stopping)")
    if any(part in text for part in _SQLITE_TRANSIENT):
        return TransientError(message)
    if isinstance(exc, sqlite3.IntegrityError):
        fix = _SQLITE_UNIQUE if "unique" in text else "fix the data or the table's constraint"
        return permanent(message, fix)
    for part, fix in _SQLITE_PERMANENT.items():
        if part in text:
            return permanent(message, fix)
    if isinstance(exc, sqlite3.DataError | sqlite3.ProgrammingError):
        return permanent(message, "the values do not fit the table: fix the spec")
    return ProviderError(message)
