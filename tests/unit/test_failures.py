"""The permanent/transient table of docs/errors.md, row by row, on the
drivers' own exception objects: the rows a real server cannot be made to
produce here on demand (a deadlock, an I/O error, S3 throttling or a 5xx).
The providers' integration tests provoke the others for real."""

from __future__ import annotations

import errno
import sqlite3

import asyncpg
import pytest
from botocore.exceptions import (  # type: ignore[import-untyped]
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from setu_engine.errors import (
    ConnectionClosed,
    OutageError,
    PermanentError,
    ProviderError,
    TransientError,
)
from setu_engine.providers.files.failures import file_error, s3_error
from setu_engine.providers.postgres.failures import postgres_error
from setu_engine.providers.sqlite.failures import sqlite_error

PG_PERMANENT = [
    asyncpg.exceptions.InvalidPasswordError,  # 28P01
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,  # 28000
    asyncpg.exceptions.InvalidCatalogNameError,  # 3D000
    asyncpg.exceptions.InvalidSchemaNameError,  # 3F000
    asyncpg.exceptions.UndefinedTableError,  # 42P01
    asyncpg.exceptions.UndefinedColumnError,  # 42703
    asyncpg.exceptions.DatatypeMismatchError,  # 42804
    asyncpg.exceptions.PostgresSyntaxError,  # 42601
    asyncpg.exceptions.UniqueViolationError,  # 23505
    asyncpg.exceptions.NotNullViolationError,  # 23502
    asyncpg.exceptions.StringDataRightTruncationError,  # 22001
    asyncpg.exceptions.InvalidTextRepresentationError,  # 22P02
]
PG_TRANSIENT = [
    asyncpg.exceptions.ConnectionFailureError,  # 08006
    asyncpg.exceptions.SerializationError,  # 40001
    asyncpg.exceptions.DeadlockDetectedError,  # 40P01
    asyncpg.exceptions.TooManyConnectionsError,  # 53300
    asyncpg.exceptions.LockNotAvailableError,  # 55P03
    asyncpg.exceptions.QueryCanceledError,  # 57014
    asyncpg.exceptions.AdminShutdownError,  # 57P01
    asyncpg.exceptions.CannotConnectNowError,  # 57P03
]


@pytest.mark.parametrize("cls", PG_PERMANENT, ids=lambda c: c.sqlstate)
def test_postgres_permanent_sqlstates(cls: type[Exception]) -> None:
    error = postgres_error(cls("boom"), "postgres: loading t")
    assert isinstance(error, PermanentError) and not error.retryable
    assert str(error).startswith("postgres: loading t: boom (")  # and a fix after it


@pytest.mark.parametrize("cls", PG_TRANSIENT, ids=lambda c: c.sqlstate)
def test_postgres_transient_sqlstates(cls: type[Exception]) -> None:
    error = postgres_error(cls("boom"), "postgres: loading t")
    assert isinstance(error, TransientError) and error.retryable


PG_OUTAGE = [
    asyncpg.exceptions.ConnectionFailureError,  # 08006
    asyncpg.exceptions.AdminShutdownError,  # 57P01
    asyncpg.exceptions.CrashShutdownError,  # 57P02
    asyncpg.exceptions.CannotConnectNowError,  # 57P03
]


@pytest.mark.parametrize("cls", PG_OUTAGE, ids=lambda c: c.sqlstate)
def test_postgres_going_away_is_an_outage_that_spends_no_attempt(cls: type[Exception]) -> None:
    error = postgres_error(cls("boom"), "postgres: loading t")
    assert isinstance(error, OutageError) and error.outage and error.retryable


def test_a_refused_reset_or_dropped_connection_is_an_outage_and_a_timeout_is_not() -> None:
    for lost in (
        ConnectionRefusedError(),
        ConnectionResetError(),
        asyncpg.exceptions.ConnectionDoesNotExistError("gone"),
        # A statement on a session the server closed while it was idle.
        asyncpg.exceptions.InterfaceError("connection is closed"),
    ):
        assert isinstance(postgres_error(lost, "x"), OutageError), lost
    for other in (
        TimeoutError(),
        asyncpg.exceptions.SerializationError("retry"),
        asyncpg.exceptions.ProtocolViolationError("bad message"),  # 08P01: a peer's fault
    ):
        error = postgres_error(other, "x")
        assert isinstance(error, TransientError) and not isinstance(error, OutageError)


def test_an_outage_at_the_first_connect_lost_no_session_and_one_on_a_live_session_did() -> None:
    # At connect: nothing was lost, so the runtime spends an attempt unless
    # the task is already in an outage streak.
    for refused in (
        ConnectionRefusedError(),
        ConnectionResetError(),
        asyncpg.exceptions.CannotConnectNowError("starting up"),  # 57P03
    ):
        error = postgres_error(refused, "postgres: cannot connect to db", connecting=True)
        assert isinstance(error, OutageError) and error.lost is False, refused
    # On a live session: the database went away under it.
    for lost in (
        ConnectionResetError(),
        asyncpg.exceptions.AdminShutdownError("terminating connection"),  # 57P01
        asyncpg.exceptions.ConnectionDoesNotExistError("gone"),
        asyncpg.exceptions.InterfaceError("connection is closed"),
    ):
        error = postgres_error(lost, "postgres: loading t")
        assert isinstance(error, OutageError) and error.lost is True, lost
    # The message is the same either way.
    assert str(postgres_error(ConnectionRefusedError("no"), "x", connecting=True)) == "x: no"


def test_postgres_login_refusal_names_the_fields_and_a_lost_connection_is_transient() -> None:
    refused = postgres_error(asyncpg.exceptions.InvalidPasswordError("no"), "postgres")
    assert isinstance(refused, PermanentError)
    assert refused.fields == ("config.user", "config.password")
    assert isinstance(postgres_error(ConnectionRefusedError(), "x"), TransientError)
    assert isinstance(postgres_error(TimeoutError(), "x"), TransientError)
    lost = asyncpg.exceptions.ConnectionDoesNotExistError("gone")
    assert isinstance(postgres_error(lost, "x"), TransientError)
    # An SQLSTATE the table does not place is retried, as before.
    plain = postgres_error(asyncpg.exceptions.InternalServerError("?"), "x")
    assert type(plain) is ProviderError and plain.retryable


@pytest.mark.parametrize(
    ("exc", "permanent"),
    [
        (sqlite3.IntegrityError("UNIQUE constraint failed: t.id"), True),
        (sqlite3.OperationalError("no such table: t"), True),
        (sqlite3.OperationalError("table t has no column named x"), True),
        (sqlite3.DatabaseError("file is not a database"), True),
        (sqlite3.OperationalError("database is locked"), False),
        (sqlite3.OperationalError("disk I/O error"), False),
    ],
)
def test_sqlite_errors(exc: sqlite3.Error, permanent: bool) -> None:
    error = sqlite_error(exc, "sqlite: writing 't'")
    assert isinstance(error, PermanentError if permanent else TransientError)


def test_a_sqlite_call_on_a_connection_closed_under_it_is_no_bad_value() -> None:
    """A read cut short by our own close (a cancel unwinding) is retried if
    anything, and never hints at the spec, though sqlite3 calls it a
    ProgrammingError, as it does a value of the wrong type."""
    closed = sqlite3.ProgrammingError("Cannot operate on a closed database.")
    error = sqlite_error(closed, "sqlite: reading 'events'")
    assert type(error) is ConnectionClosed and error.retryable
    assert (
        str(error) == "sqlite: reading 'events': the connection was closed (the task is stopping)"
    )
    wrong = sqlite_error(sqlite3.ProgrammingError("Error binding parameter 1"), "w")
    assert isinstance(wrong, PermanentError) and "fix the spec" in str(wrong)


def test_a_sqlite_duplicate_key_names_the_fix() -> None:
    error = sqlite_error(sqlite3.IntegrityError("UNIQUE constraint failed: t.id"), "w")
    assert "use write_mode upsert or overwrite, or clear the table" in str(error)


@pytest.mark.parametrize(
    ("code", "permanent"),
    [
        (errno.ENOENT, True),
        (errno.EACCES, True),
        (errno.EPERM, True),
        (errno.ENOTDIR, True),
        (errno.EIO, False),
        (errno.EAGAIN, False),
        (errno.ETIMEDOUT, False),
    ],
)
def test_file_errors(code: int, permanent: bool) -> None:
    error = file_error(OSError(code, "why"), "cannot read people.csv")
    assert isinstance(error, PermanentError if permanent else TransientError)
    assert str(error).startswith("cannot read people.csv: why")


def _client_error(code: str, status: int) -> ClientError:
    response = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "GetObject")


@pytest.mark.parametrize(
    ("code", "status", "permanent", "fields"),
    [
        ("AccessDenied", 403, True, True),
        ("InvalidAccessKeyId", 403, True, True),
        ("SignatureDoesNotMatch", 403, True, True),
        ("NoSuchBucket", 404, True, False),
        ("NoSuchKey", 404, True, False),
        ("SlowDown", 503, False, False),
        ("Throttling", 400, False, False),
        ("InternalError", 500, False, False),
        ("ServiceUnavailable", 503, False, False),
        ("Anything", 502, False, False),
    ],
)
def test_s3_client_errors(code: str, status: int, permanent: bool, fields: bool) -> None:
    error = s3_error(_client_error(code, status), "s3://b/k")
    assert isinstance(error, PermanentError if permanent else TransientError)
    if isinstance(error, PermanentError):
        assert bool(error.fields) is fields


def test_s3_connection_failures_are_transient_and_no_credentials_permanent() -> None:
    for exc in (
        EndpointConnectionError(endpoint_url="http://s3"),
        ReadTimeoutError(endpoint_url="http://s3"),
    ):
        assert isinstance(s3_error(exc, "s3://b/k"), TransientError)
    assert isinstance(s3_error(NoCredentialsError(), "s3://b/k"), PermanentError)


# -- mysql (asyncmy: args are (code, message)) --------------------------------

MYSQL_OUTAGE = [2002, 2003, 2006, 2013, 2055, 1053, 1927]
MYSQL_TRANSIENT = [1205, 1213, 1040, 1203, 1317, 3024, 1969, 1037, 1038, 1020, 1114]
MYSQL_PERMANENT = [1045, 1044, 1049, 1146, 1054, 1142, 1062, 1048, 1452, 1264, 1366, 1406, 1064]


@pytest.mark.parametrize("code", MYSQL_OUTAGE)
def test_mysql_outage_codes(code: int) -> None:
    from asyncmy.errors import OperationalError  # type: ignore[import-untyped,unused-ignore]

    from setu_engine.providers.mysql.failures import mysql_error

    error = mysql_error(OperationalError(code, "gone"), "mysql: reading t")
    assert isinstance(error, OutageError) and error.lost
    first = mysql_error(OperationalError(code, "gone"), "mysql: connect", connecting=True)
    assert isinstance(first, OutageError) and not first.lost


@pytest.mark.parametrize("code", MYSQL_TRANSIENT)
def test_mysql_transient_codes(code: int) -> None:
    from asyncmy.errors import OperationalError

    from setu_engine.providers.mysql.failures import mysql_error

    error = mysql_error(OperationalError(code, "try again"), "mysql: loading t")
    assert isinstance(error, TransientError) and not isinstance(error, OutageError)


@pytest.mark.parametrize("code", MYSQL_PERMANENT)
def test_mysql_permanent_codes_name_their_fix(code: int) -> None:
    from asyncmy.errors import ProgrammingError

    from setu_engine.providers.mysql.failures import mysql_error

    error = mysql_error(ProgrammingError(code, "no"), "mysql: loading t")
    assert isinstance(error, PermanentError) and not error.retryable
    assert str(error).startswith(f"mysql: loading t: ({code}, 'no') (")


def test_mysql_login_refusal_names_the_login_fields_and_sockets_fail_as_the_network() -> None:
    import asyncio
    import ssl

    from asyncmy.errors import OperationalError

    from setu_engine.providers.mysql.failures import mysql_error

    refused = mysql_error(OperationalError(1045, "Access denied"), "mysql: connect")
    assert isinstance(refused, PermanentError)
    assert refused.fields == ("config.user", "config.password")
    assert isinstance(mysql_error(ConnectionResetError(), "mysql"), OutageError)
    assert isinstance(mysql_error(ConnectionRefusedError(111, "refused"), "mysql"), OutageError)
    assert isinstance(mysql_error(TimeoutError(), "mysql"), TransientError)
    assert isinstance(mysql_error(asyncio.IncompleteReadError(b"", 4), "mysql"), OutageError)
    tls = mysql_error(ssl.SSLError(1, "WRONG_VERSION_NUMBER"), "mysql: connect")
    assert isinstance(tls, PermanentError) and tls.fields == ("config.ssl",)
    assert type(mysql_error(ValueError("odd"), "mysql")) is ProviderError
