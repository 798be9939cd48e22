"""Connection pool and the translation of database errors into domain errors."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeAlias

import asyncpg

from setu_client.errors import (
    AlreadyExists,
    DatabaseUnavailable,
    FailedPrecondition,
    InvalidArgument,
    Unavailable,
)

# The store's handles on the database. Services hold a Database and pass it,
# or a Connection from `transaction()`, to store functions; only store/ knows
# that these are asyncpg's pool and connection.
Database: TypeAlias = asyncpg.Pool
Connection: TypeAlias = asyncpg.Connection
# What store functions run on: the pool, or one connection when the caller
# wants several store calls in one transaction.
Executor: TypeAlias = Database | Connection


def _jsonb_out(value: Any) -> bytes:
    return b"\x01" + json.dumps(value).encode()


def _jsonb_in(data: bytes) -> Any:
    return json.loads(data[1:])  # binary jsonb: a version byte, then the text


async def _init_connection(conn: asyncpg.Connection) -> None:
    # Binary codecs: rows nested in a composite (a job returned beside its
    # task) can only be decoded when every column of it decodes in binary.
    await conn.set_type_codec(
        "jsonb", encoder=_jsonb_out, decoder=_jsonb_in, schema="pg_catalog", format="binary"
    )
    await conn.set_type_codec(
        "json",
        encoder=lambda v: json.dumps(v).encode(),
        decoder=lambda b: json.loads(b),
        schema="pg_catalog",
        format="binary",
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pooled connections carry no session state (no LISTEN, no session-level
    advisory locks, no SET but SET LOCAL): those live on dedicated connections,
    and a transaction-mode pooler would share them between sessions. So a connection goes back to
    the pool as it is, instead of asyncpg's default reset, which costs a
    round trip on every release, doubling the cost of a one-query call."""


# asyncpg's default: the statements a connection keeps prepared, by text.
STATEMENT_CACHE_SIZE = 100


def _cache_size(statement_cache: bool) -> int:
    """asyncpg names every statement it caches (`__asyncpg_stmt_N__`), and a
    named statement lives in the PostgreSQL session that prepared it. Behind
    a transaction-mode pooler the next transaction may run in another session
    (InvalidSQLStatementNameError), and another process's counter may pick a
    name this session already holds (DuplicatePreparedStatementError). Without
    the cache every query is an unnamed statement, parsed again each time:
    one more round trip per query (docs/operations.md, "PostgreSQL through a
    pooler")."""
    return STATEMENT_CACHE_SIZE if statement_cache else 0


async def create_pool(
    url: str, *, min_size: int = 1, max_size: int = 10, statement_cache: bool = True
) -> Database:
    with translate_errors():
        pool: Database = await asyncpg.create_pool(
            url,
            min_size=min_size,
            max_size=max_size,
            init=_init_connection,
            reset=_keep_session,
            statement_cache_size=_cache_size(statement_cache),
        )
    return pool


async def connect(url: str, *, statement_cache: bool = True) -> Connection:
    """A connection outside the pool (migrations, LISTEN)."""
    with translate_errors():
        conn: Connection = await asyncpg.connect(
            url, statement_cache_size=_cache_size(statement_cache)
        )
    await _init_connection(conn)
    return conn


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Database errors leave the store as domain errors."""
    try:
        yield
    except asyncpg.UniqueViolationError as exc:
        raise AlreadyExists(_constraint_message(exc, "already exists")) from exc
    except asyncpg.ForeignKeyViolationError as exc:
        raise FailedPrecondition(_constraint_message(exc, "is still referenced")) from exc
    except asyncpg.NumericValueOutOfRangeError as exc:
        # 22003: a count a caller sent, summed, left a bigint. The requests'
        # rules bound every count; this is the backstop, never INTERNAL.
        raise InvalidArgument(f"a number is out of range ({exc})") from exc
    except asyncpg.TransactionRollbackError as exc:
        # 40001 serialization failure, 40P01 deadlock: the database rolled the
        # work back whole, so running it again is safe; callers (the SDK, the
        # runtimes) retry UNAVAILABLE with backoff. Never INTERNAL.
        raise Unavailable(
            "the database rolled this back under contention (deadlock or "
            "serialization failure); try again"
        ) from exc
    # Said apart from other UNAVAILABLEs (the setu-error-reason trailer), so
    # runtimes retry within a second or two and resume as the database returns.
    except (asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError, OSError) as exc:
        raise DatabaseUnavailable("the database is unreachable; try again shortly") from exc
    except asyncpg.InterfaceError as exc:
        if "closed" in str(exc) or "connection" in str(exc):
            raise DatabaseUnavailable(
                "the database connection was lost; try again shortly"
            ) from exc
        raise


def _constraint_message(exc: asyncpg.IntegrityConstraintViolationError, what: str) -> str:
    table = getattr(exc, "table_name", None) or "object"
    return f"{table.replace('_', ' ')} {what}"


@contextlib.asynccontextmanager
async def transaction(pool: Database, *, commit: bool = True) -> AsyncIterator[Connection]:
    """One connection in one transaction, errors translated. With `commit`
    False the work is rolled back at the end, error or not: a validate_only
    call runs the real writes and keeps none of them."""
    with translate_errors():
        async with pool.acquire() as conn:
            work = conn.transaction()
            await work.start()
            try:
                yield conn
            except BaseException:
                await work.rollback()
                raise
            await (work.commit() if commit else work.rollback())


def row_dict(record: Any) -> dict[str, Any]:
    return dict(record) if record is not None else {}
