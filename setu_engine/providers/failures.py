"""Each driver's errors as PermanentError or TransientError (docs/errors.md,
"Task failures: permanent or transient"). A provider calls these where it
catches its driver's error, so a failure is classified once, at its source,
and the agent and the cloud worker report it alike.

A permanent message names the fix; an error no rule places stays a plain
ProviderError, which is retried.
"""

from __future__ import annotations

import errno
import sqlite3
from typing import Any

from setu_engine.errors import (
    ConnectionClosed,
    OutageError,
    PermanentError,
    ProviderError,
    TransientError,
)

# -- PostgreSQL, by SQLSTATE (exact code first, then its two-letter class)

PG_LOGIN = ("config.user", "config.password")
_PG_PERMANENT: dict[str, str] = {
    "28": "the server refused the login: check config.user and the password",
    "3D000": "the database does not exist: check config.database",
    "3F000": (
        "the schema does not exist: create it, or name an existing one in "
        "config.schema (or the pipeline's spec.destination)"
    ),
    "42P01": "the table does not exist: run discover to see what the connection offers",
    "42703": (
        "the destination table's columns do not match the stream's: add the missing "
        "column(s), drop the table so the load creates it, or select and rename "
        "columns in the pipeline spec"
    ),
    "42501": "the user lacks a privilege it needs: grant it, or connect as another user",
    "42": "the statement does not fit the destination (a type or name mismatch): fix the spec",
    "23505": (
        "a row repeats a unique key of the destination table: use write_mode upsert "
        "or overwrite, or clear the table"
    ),
    "23": "a row breaks a constraint of the destination table: fix the data or the constraint",
    "22": (
        "a value does not fit its column: cast or filter it in the pipeline spec, or "
        "change the column's type"
    ),
}
# 08 connection, 40001/40P01 serialization failure and deadlock, 53 out of
# resources, 55P03 lock not available, 57014 statement timeout, 57P0x a
# server shutting down or restarting, 58 system error.
_PG_TRANSIENT = ("08", "40001", "40P01", "53", "55P03", "57014", "57P", "58")


# The database itself went away for a moment: 08 connection exceptions,
# 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now (a
# restart: `pg_ctl restart -m fast`, a failover).
_PG_OUTAGE = ("08", "57P01", "57P02", "57P03")
# ... but a protocol violation is a fault of a peer, not a database away.
_PG_NOT_OUTAGE = ("08P01",)


def postgres_error(exc: BaseException, what: str) -> ProviderError:
    """`what: exc` classified by its SQLSTATE; a connection that broke or
    could not be opened (OSError, a timeout) is transient, and one refused,
    reset or closed by the server an outage (retried without spending an
    attempt)."""
    message = f"{what}: {exc}"
    state = str(getattr(exc, "sqlstate", None) or "")
    if state:
        if state not in _PG_NOT_OUTAGE and any(state.startswith(p) for p in _PG_OUTAGE):
            return OutageError(message)
        if any(state.startswith(prefix) for prefix in _PG_TRANSIENT):
            return TransientError(message)
        fix = _PG_PERMANENT.get(state) or _PG_PERMANENT.get(state[:2])
        if fix is not None:
            fields = PG_LOGIN if state.startswith("28") else ()
            return PermanentError(f"{message} ({fix})", fields=fields)
        return ProviderError(message)
    if (
        isinstance(exc, ConnectionError)
        or type(exc).__name__ in _PG_LOST
        or any(words in str(exc) for words in _PG_CLOSED)
    ):
        return OutageError(message)
    if isinstance(exc, OSError | TimeoutError):
        return TransientError(message)
    return ProviderError(message)


# asyncpg's own names for a connection that went away mid-statement.
_PG_LOST = frozenset({"ConnectionDoesNotExistError", "ConnectionResetError"})
# asyncpg's words for a statement on a session the server closed (an
# InterfaceError: the server's goodbye came while the session was idle).
_PG_CLOSED = ("connection is closed", "connection was closed")


# -- SQLite

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
_SQLITE_UNIQUE = (
    "a row repeats a unique key of the table: use write_mode upsert or overwrite, "
    "or clear the table"
)


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
        return PermanentError(f"{message} ({fix})")
    for part, fix in _SQLITE_PERMANENT.items():
        if part in text:
            return PermanentError(f"{message} ({fix})")
    if isinstance(exc, sqlite3.DataError | sqlite3.ProgrammingError):
        return PermanentError(f"{message} (the values do not fit the table: fix the spec)")
    return ProviderError(message)


# -- local files, by errno

_FILE_PERMANENT = {
    errno.ENOENT: "it does not exist: check config.url",
    errno.ENOTDIR: "a part of the path is not a folder: check config.url",
    errno.EISDIR: "it is a folder where a file was expected: check config.url",
    errno.EACCES: "permission denied: give this runtime access, or check config.url",
    errno.EPERM: "operation not permitted: give this runtime access, or check config.url",
    errno.EROFS: "the file system is read-only: write somewhere else",
    errno.ELOOP: "a link points at itself: check config.url",
}
_FILE_TRANSIENT = frozenset(
    {errno.EIO, errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT, errno.ESTALE}
)


def file_error(exc: OSError, what: str) -> ProviderError:
    message = f"{what}: {exc.strerror or exc}"
    if exc.errno in _FILE_TRANSIENT:
        return TransientError(message)
    fix = _FILE_PERMANENT.get(exc.errno or 0)
    if fix is not None:
        return PermanentError(f"{message} ({fix})")
    return ProviderError(message)


# -- S3 (botocore), by error code, HTTP status and exception type

S3_KEYS = ("config.access_key_id", "config.secret_access_key")
_S3_CREDENTIALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403"})
_S3_MISSING = "check config.url and config.endpoint_url"
_S3_PERMANENT = {
    "NoSuchBucket": _S3_MISSING,
    "NoSuchKey": _S3_MISSING,
    "404": _S3_MISSING,
    "InvalidBucketName": "check the bucket in config.url",
    "AllAccessDisabled": "access to the bucket is disabled: check config.url",
}
_S3_TRANSIENT = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
    }
)
# botocore's exceptions for a connection that failed or timed out.
_S3_LOST = frozenset(
    {
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionError",
        "ProxyConnectionError",
        "HTTPClientError",
    }
)


def s3_error(exc: Exception, message: str) -> ProviderError:
    """`message` (which already says what failed where) classified by the
    botocore error it came from."""
    response: dict[str, Any] = getattr(exc, "response", None) or {}
    if response:
        code = str(response.get("Error", {}).get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in _S3_TRANSIENT or status >= 500 or status == 429:
            return TransientError(message)
        if code in _S3_CREDENTIALS:
            fix = "check the access key, its secret and the key's permissions on the bucket"
            return PermanentError(f"{message} ({fix})", fields=S3_KEYS)
        missing = _S3_PERMANENT.get(code)
        if missing is not None:
            return PermanentError(f"{message} ({missing})")
        return ProviderError(message)
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & _S3_LOST:
        return TransientError(message)
    if "NoCredentialsError" in names:
        return PermanentError(
            f"{message} (no credentials: set config.access_key_id and the secret key)",
            fields=S3_KEYS,
        )
    return ProviderError(message)
