"""DuckDB's errors (the `duckdb` module's exception classes) as
TransientError, PermanentError, ValueFault or ConnectionClosed, by class and
message (docs/errors.md, "Task failures: permanent or transient"; the shape
is setu_engine/providers/failures.py's)."""

from __future__ import annotations

from pathlib import Path

import duckdb

from setu_engine.errors import ConnectionClosed, ProviderError, TransientError, ValueFault
from setu_engine.providers.failures import permanent

# DuckDB's words when another process holds the file's lock (one writer, or
# any number of read-only readers, per file across processes).
_LOCKED = "could not set lock on file"
# The same fix as PostgreSQL's for a duplicate key (postgres/failures.py 23505).
DUPLICATE_KEY = (
    "a row repeats a unique key of the destination table: use write_mode upsert "
    "or overwrite, or clear the table"
)
_PERMANENT: tuple[tuple[type[duckdb.Error], str], ...] = (
    (duckdb.CatalogException, "the table or column does not exist: run discover to see the file's"),
    (duckdb.BinderException, "the statement does not fit the table's columns: fix the spec"),
    (duckdb.PermissionException, "the file or operation is not allowed for this connection"),
    (duckdb.InvalidInputException, "config.path is not a DuckDB database this version reads"),
    (duckdb.NotImplementedException, "DuckDB cannot do this for the table: fix the spec"),
)


def locked(path: Path, exc: BaseException) -> TransientError:
    """The file's write lock is held by another process."""
    return TransientError(
        f"duckdb: {path} is locked: another process has it open for writing (or reading, "
        f"while this connection needs to write); close it there, or retry later ({exc})"
    )


def duckdb_error(exc: BaseException, what: str, path: Path | None = None) -> ProviderError:
    message = f"{what}: {exc}"
    text = str(exc).lower()
    if isinstance(exc, duckdb.IOException) and _LOCKED in text and path is not None:
        return locked(path, exc)
    if isinstance(exc, duckdb.ConnectionException) and "closed" in text:
        return ConnectionClosed(f"{what}: the connection was closed (the task is stopping)")
    if isinstance(exc, duckdb.InterruptException):
        # Our own interrupt(), from a cancelled task: the cancel is what unwinds.
        return ConnectionClosed(f"{what}: interrupted (the task is stopping)")
    if isinstance(
        exc, duckdb.IOException | duckdb.TransactionException | duckdb.OutOfMemoryException
    ):
        # A write conflict between two connections, a full disk, memory: another
        # attempt may pass.
        return TransientError(message)
    if isinstance(exc, duckdb.ConstraintException):
        duplicate = "duplicate key" in text or "unique" in text
        return permanent(message, DUPLICATE_KEY if duplicate else "fix the data or the constraint")
    if isinstance(exc, duckdb.ConversionException | duckdb.OutOfRangeException):
        return ValueFault(f"{what}: a value does not fit its column ({exc})", column=None, value="")
    for kind, fix in _PERMANENT:
        if isinstance(exc, kind):
            return permanent(message, fix)
    return ProviderError(message)
