"""PostgreSQL's errors (asyncpg's, and the socket's under it) as
OutageError, TransientError or PermanentError, by SQLSTATE
(docs/errors.md, "Task failures: permanent or transient"; the shape is
setu_engine/providers/failures.py's)."""

from __future__ import annotations

from setu_engine.errors import OutageError, ProviderError, TransientError
from setu_engine.providers.failures import DUPLICATE_KEY, network_error, permanent

# By SQLSTATE: the exact code first, then its two-letter class.

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
    "23505": DUPLICATE_KEY,
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


def postgres_error(exc: BaseException, what: str, *, connecting: bool = False) -> ProviderError:
    """`what: exc` classified by its SQLSTATE; a connection that broke or
    could not be opened (OSError, a timeout) is transient, and one refused,
    reset or closed by the server an outage (retried without spending an
    attempt). `connecting`: raised by the connector's first connect, so no
    session was lost (OutageError's `lost` is False)."""
    message = f"{what}: {exc}"
    lost = not connecting
    state = str(getattr(exc, "sqlstate", None) or "")
    if state:
        if state not in _PG_NOT_OUTAGE and any(state.startswith(p) for p in _PG_OUTAGE):
            return OutageError(message, lost=lost)
        if any(state.startswith(prefix) for prefix in _PG_TRANSIENT):
            return TransientError(message)
        fix = _PG_PERMANENT.get(state) or _PG_PERMANENT.get(state[:2])
        if fix is not None:
            return permanent(message, fix, PG_LOGIN if state.startswith("28") else ())
        return ProviderError(message)
    if type(exc).__name__ in _PG_LOST or any(words in str(exc) for words in _PG_CLOSED):
        return OutageError(message, lost=lost)
    return network_error(exc, message, lost=lost) or ProviderError(message)


# asyncpg's own names for a connection that went away mid-statement.
_PG_LOST = frozenset({"ConnectionDoesNotExistError", "ConnectionResetError"})
# asyncpg's words for a statement on a session the server closed (an
# InterfaceError: the server's goodbye came while the session was idle).
_PG_CLOSED = ("connection is closed", "connection was closed")
