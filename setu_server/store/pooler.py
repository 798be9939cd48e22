"""What stands between Setu and PostgreSQL: nothing, or a pooler (PgBouncer,
say) in session or transaction mode.

A session-mode pooler gives each client connection one PostgreSQL session
for as long as it is open: to Setu that is PostgreSQL itself. A
transaction-mode pooler hands each transaction whichever session is free, so
nothing may outlive a transaction on a pooled connection: no named prepared
statement (asyncpg's statement cache, store/db.py), no session-level lock or
setting (store/migrate.py), no LISTEN (store/listener.py, which holds its
own connection, SETU_LISTEN_DATABASE_URL).

`auto` (the default) looks: two connections open at once that run on one
PostgreSQL backend, or one connection that moves between backends, can only
be a transaction-mode (or statement-mode) pooler. Under load the pooler may
happen to keep each connection on a backend of its own, so the look can miss
one: an operator who runs one says so (SETU_DATABASE_POOLER=transaction).
"""

from __future__ import annotations

import enum
import logging

from setu_server.store import db
from setu_server.store.queries import QUERIES

log = logging.getLogger(__name__)

# Statements per connection in the look: a pooler that keeps its sessions in
# LIFO order (PgBouncer's default) shows itself on the first.
_ROUNDS = 3


class Pooler(enum.StrEnum):
    AUTO = "auto"
    NONE = "none"
    SESSION = "session"
    TRANSACTION = "transaction"

    @property
    def keeps_sessions(self) -> bool:
        """Whether a connection keeps one PostgreSQL session while it is open."""
        return self is not Pooler.TRANSACTION


def pooler_setting(raw: str) -> Pooler:
    try:
        return Pooler(raw.strip().lower())
    except ValueError:
        choices = ", ".join(p.value for p in Pooler)
        raise SystemExit(f"SETU_DATABASE_POOLER is one of {choices}, not {raw!r}") from None


async def shares_sessions(url: str) -> bool:
    """True when connections to `url` do not each keep a PostgreSQL session."""
    first = await db.connect(url, statement_cache=False)
    try:
        second = await db.connect(url, statement_cache=False)
        try:
            seen: tuple[set[int], set[int]] = (set(), set())
            for _ in range(_ROUNDS):
                a = await first.fetchval(QUERIES.backend_pid)
                b = await second.fetchval(QUERIES.backend_pid)
                seen[0].add(a)
                seen[1].add(b)
                if a == b or len(seen[0]) > 1 or len(seen[1]) > 1:
                    return True
            return False
        finally:
            await second.close()
    finally:
        await first.close()


async def resolve_pooler(setting: Pooler, url: str) -> Pooler:
    """The pooler Setu treats `url` as going through: the setting, or what
    `auto` finds (NONE when connections keep their sessions, which a
    session-mode pooler does too)."""
    if setting is not Pooler.AUTO:
        found = setting
    elif await shares_sessions(url):
        found = Pooler.TRANSACTION
        log.info(
            "the database URL goes through a transaction-mode pooler (two connections ran "
            "on one PostgreSQL backend): no statement cache, LISTEN needs a session of its "
            "own (SETU_LISTEN_DATABASE_URL); set SETU_DATABASE_POOLER=transaction to say so"
        )
    else:
        found = Pooler.NONE
    log.info(
        "database pooler",
        extra={
            "pooler": found.value,
            "setting": setting.value,
            "statement_cache": found.keeps_sessions,
        },
    )
    return found
