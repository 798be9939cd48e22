"""MySQL's and MariaDB's errors (asyncmy's, and the socket's under it) as
OutageError, TransientError or PermanentError, by the server's error code
(docs/errors.md, "Task failures: permanent or transient"; the shape is
setu_engine/providers/failures.py's).

asyncmy raises its errors with `args == (code, message)`: server codes are
1000-1999 (and 3000+ on MySQL 8, 4000+ on MariaDB), client codes 2000-2999
(2002/2003 cannot connect, 2006 gone away, 2013 lost during a query). One
table here serves the read side and the write side (write.py).
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import Sequence

from asyncmy.errors import MySQLError  # type: ignore[import-untyped,unused-ignore]

from setu_engine.errors import OutageError, PermanentError, ProviderError, TransientError
from setu_engine.providers.failures import DUPLICATE_KEY, network_error, permanent
from setu_engine.values.types import Column

MYSQL_LOGIN = ("config.user", "config.password")
# What a statement may raise: the server's errors, and a session that went
# away under it; mysql_error classifies them.
DRIVER_ERRORS = (MySQLError, OSError, asyncio.IncompleteReadError, TimeoutError)

# The server itself went away for a moment: cannot connect (2002 socket,
# 2003 TCP), gone away (2006), lost during a query (2013, 2055), the
# server shutting down (1053) or the session killed by it (1927, MariaDB).
_OUTAGE = frozenset({2002, 2003, 2006, 2013, 2055, 1053, 1927})
# Another attempt may pass: lock wait timeout (1205), deadlock (1213), too
# many connections (1040, 1203), query interrupted (1317), a statement
# timeout (3024 MySQL's max_execution_time, 1969 MariaDB's
# max_statement_time), out of memory or sort space (1037, 1038), record
# changed since read (1020), a table full (1114: disk space freed, it fits).
_TRANSIENT = frozenset({1205, 1213, 1040, 1203, 1317, 3024, 1969, 1037, 1038, 1020, 1114})

_VALUE = (
    "a value does not fit its column: cast or filter it in the pipeline spec, or "
    "change the column's type"
)
_PRIVILEGE = "the user lacks a privilege it needs: grant it, or connect as another user"
_PERMANENT: dict[int, tuple[str, tuple[str, ...]]] = {
    1045: ("the server refused the login: check config.user and the password", MYSQL_LOGIN),
    1044: ("the user may not use this database: grant it, or check config.database", ()),
    1049: ("the database does not exist: check config.database", ("config.database",)),
    1146: ("the table does not exist: run discover to see what the connection offers", ()),
    1054: (
        "the destination table's columns do not match the stream's: add the missing "
        "column(s), drop the table so the load creates it, or select and rename "
        "columns in the pipeline spec",
        (),
    ),
    1142: (_PRIVILEGE, ()),
    1143: (_PRIVILEGE, ()),
    1227: (_PRIVILEGE, ()),
    1370: (_PRIVILEGE, ()),
    1062: (DUPLICATE_KEY, ()),
    1586: (DUPLICATE_KEY, ()),
    1048: ("a NULL in a NOT NULL column: fix the data or make the column nullable", ()),
    1451: ("a row breaks a foreign key of the destination: fix the data or the key", ()),
    1452: ("a row breaks a foreign key of the destination: fix the data or the key", ()),
    3819: ("a row breaks a CHECK constraint of the destination: fix the data", ()),
    4025: ("a row breaks a CHECK constraint of the destination: fix the data", ()),
    1264: (_VALUE, ()),
    1265: (_VALUE, ()),
    1292: (_VALUE, ()),
    1366: (_VALUE, ()),
    1406: (_VALUE, ()),
    1416: (_VALUE, ()),
    3140: ("a value is not valid JSON for a json column: fix the data", ()),
    4038: ("a value is not valid JSON for a json column: fix the data", ()),
    1043: ("the server refused the handshake: check config.host, config.port and config.ssl", ()),
    2026: (
        "the TLS handshake failed: check config.ssl (prefer or disable for a server without "
        "TLS, the server's certificate for verify-ca and verify-full)",
        ("config.ssl",),
    ),
    1046: ("no database selected: set config.database", ("config.database",)),
    1064: ("the statement does not parse on this server: report it as a bug in Setu", ()),
    1050: ("the table exists already: drop it or load into another name", ()),
    1051: ("the table does not exist: check the stream's name", ()),
    1118: ("the row is too wide for InnoDB: store wide text columns as text or blob", ()),
    1170: ("a key column of text or blob needs a prefix length: declare it varchar(n)", ()),
    1071: ("the key is too long for InnoDB (3072 bytes): use a shorter key column", ()),
    1290: ("the server refuses it under its --secure-file-priv or read-only setting", ()),
    1148: ("the server refuses LOAD DATA LOCAL (local_infile is off)", ()),
    3948: ("the server refuses LOAD DATA LOCAL (local_infile is off)", ()),
}
# Codes that mean a statement of Setu's own does not fit this server, or
# the server's own data: no rule above, still not worth a retry.
_PERMANENT_RANGES = ((1000, 2000), (3000, 5000))


def code_of(exc: BaseException) -> int | None:
    """The server's (or client's) error code asyncmy carries as args[0];
    None for an OSError, whose args[0] is an errno."""
    if isinstance(exc, OSError):
        return None
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int) and not isinstance(args[0], bool):
        return args[0]
    return None


def mysql_error(exc: BaseException, what: str, *, connecting: bool = False) -> ProviderError:
    """`what: exc` classified by its MySQL error code; a socket that broke
    is an outage (refused, reset) or transient (a timeout). `connecting`:
    raised by the connector's first connect, so no session was lost."""
    if isinstance(exc, ProviderError):
        return exc
    lost = not connecting
    code = code_of(exc)
    message = f"{what}: {exc}"
    if code is not None:
        if code in _OUTAGE:
            cause = exc.__cause__ or exc.__context__
            if code == 2003 and isinstance(cause, ssl.SSLError):
                return _tls_refused(message)
            return OutageError(message, lost=lost)
        if code in _TRANSIENT:
            return TransientError(message)
        rule = _PERMANENT.get(code)
        if rule is not None:
            fix, fields = rule
            return permanent(message, fix, fields)
        if any(low <= code < high for low, high in _PERMANENT_RANGES):
            return PermanentError(message)
        return ProviderError(message)
    if isinstance(exc, ssl.SSLError):
        return _tls_refused(message)
    if isinstance(exc, asyncio.IncompleteReadError):
        return OutageError(message, lost=lost)
    return network_error(exc, message, lost=lost) or ProviderError(message)


def _tls_refused(message: str) -> PermanentError:
    return permanent(message, _PERMANENT[2026][0], ("config.ssl",))


def append_duplicate(exc: BaseException) -> bool:
    """A duplicate key met by an append (1062, 1586): permanent, with the hint."""
    return code_of(exc) in (1062, 1586)


# What asyncmy's row parser and its converters raise for a value no real
# server sends (a hostile one may): text that is not UTF-8, a decimal or an
# integer that does not parse, a packet too short for its fields (an ERR
# packet of one byte). ValueFault and every ConfigError are ValueErrors
# too: a handler catches ProviderError first and lets it pass.
MALFORMED = (UnicodeError, ValueError, ArithmeticError, struct.error, IndexError)

# The neutral types whose values asyncmy decodes as text, or parses as a
# number or a time, so a column where each error class can arise.
_DECODED = frozenset({"text", "json", "uuid"})
_PARSED = frozenset(
    {"smallint", "integer", "bigint", "real", "double", "numeric", "boolean"}
    | {"date", "time", "timestamp", "timestamptz"}
)


class MalformedRow(PermanentError):
    """A row the server sent that the driver cannot decode."""


def malformed_row(exc: BaseException, stream: str, columns: Sequence[Column]) -> MalformedRow:
    """A PermanentError for a row asyncmy could not decode, naming the
    stream and the column when the error's class leaves only one (asyncmy's
    parser does not say which field it was at)."""
    if isinstance(exc, struct.error | IndexError):
        kinds, what = frozenset[str](), "a packet too short for its fields"
    elif isinstance(exc, UnicodeError):
        kinds, what = _DECODED, "text that is not UTF-8"
    elif isinstance(exc, ArithmeticError):
        kinds, what = frozenset({"numeric"}), "a decimal that does not parse"
    else:
        kinds, what = _PARSED, "a value that does not parse as its column's type"
    names = [c.name for c in columns if c.type in kinds]
    if len(names) == 1:
        where = f", column {names[0]!r}"
    elif names:
        where = f", one of the columns {', '.join(repr(n) for n in names)}"
    else:
        where = ""
    detail = str(exc)[:200]
    return MalformedRow(
        f"mysql: stream {stream!r}{where}: the server sent {what} "
        f"({type(exc).__name__}: {detail}); the server's data or its protocol is broken: "
        "fix or leave out the row, or check what answers at config.host"
    )
