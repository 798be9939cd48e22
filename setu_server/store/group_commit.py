"""Group commit: the leases and completions that one server process receives
at the same moment share one transaction, so they share one WAL flush and
one hold of PostgreSQL's notify lock.

Why: a commit that NOTIFYs holds the database's notify lock through its WAL
flush, so such commits serialise, whoever makes them. Leases that start jobs
and completions that end them notify (the transition contract: state,
version, event and NOTIFY in one transaction; a crash cannot lose a
wake-up), so one transaction per call caps dispatch at one flush per call.
Sharing the transaction keeps the contract and pays the flush once per batch.

How: a caller enqueues what it wants and waits. One drain takes everything
queued, runs it in one transaction, commits once and answers each caller.
- Lease requests of one runtime become one lease statement (a token each;
  SKIP LOCKED as always), its rows dealt out in arrival order.
- Other parts (completions: store/completer.py) run one after another, each inside a savepoint:
  a part that fails rolls back alone, and only its caller sees the error.
  A part may ask for a lease once it succeeded (an eager lease); that joins
  its runtime's lease statement, so a refused part leases nothing.
- Parts that can say how to run merged (`Merge`: a plain success of a task
  whose success ends its job) run first, as one statement for all of them;
  a part that statement leaves out (it would be refused, or is a repeat)
  then runs alone in its savepoint as above, so it is still refused alone.
  Should the merged statement itself fail, every part of it runs alone.
- A batch waits for a row lock at most `lock_timeout` (SET LOCAL): a part
  (or lease) that timed out rolls back alone and its caller is retried
  alone, in a transaction of its own and without the limit, once the rest
  of the batch committed; so one locked row cannot stall everyone's dispatch.
- A failed commit fails every caller of the batch: none of it happened.
A few batches run at once (`in_flight`, each on its own connection, so the
database's CPUs all work); callers beyond them wait for the next batch. So a
lone caller runs at once, in a transaction of its own, without a savepoint;
a lone lease or a lone one-statement part runs as one statement, outside
any transaction, and so does a batch of only leases of one runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import asyncpg

from setu_server.hooks import Hooks
from setu_server.store.db import Connection, Database, Executor, transaction

T = TypeVar("T")
Row = TypeVar("Row")
# A part of a batch: what one caller runs on the batch's connection.
Part = Callable[[Executor], Awaitable[T]]
# Leases `count` tasks of `runtime` on a connection: the rows, oldest first.
LeaseStatement = Callable[[Executor, str, int], Awaitable[list[Row]]]
A = TypeVar("A")


@dataclass(frozen=True)
class Merge(Generic[A, T]):
    """How a part may run merged with the parts of its batch that name the
    same statement: `statement` runs once for all their `arg`s and answers
    one value per arg, the part's value, or None where it left that arg out
    (that part then runs alone)."""

    statement: Callable[[Executor, list[A]], Awaitable[list[T | None]]]
    arg: A


@dataclass(eq=False)
class _Entry(Generic[Row]):
    answer: asyncio.Future[tuple[Any, list[Row]]]
    # What the caller runs in the batch (None: it only leases).
    part: Part[Any] | None
    # Leases `count` tasks of this runtime (after the part, if it succeeded).
    runtime: str | None
    count: int
    # The part is one statement: alone in its batch, it needs no transaction.
    one_statement: bool = False
    # How the part may run merged with others (None: it runs alone).
    merge: Merge[Any, Any] | None = None
    # A merged statement did the part's work: the part does not run.
    merged: bool = False
    # It met the batch's lock timeout: retried alone once the batch commits.
    retry_alone: bool = False
    value: Any = None
    leased: list[Row] = field(default_factory=list)


class GroupCommit(Generic[Row]):
    def __init__(
        self,
        pool: Database,
        lease: LeaseStatement[Row],
        *,
        in_flight: int = 4,
        max_batch: int = 64,
        lock_timeout: float = 0.25,
    ) -> None:
        self._pool = pool
        self._lease = lease
        # Batches running at once (each on its own connection): one would
        # put all dispatch on one backend, one CPU; only callers beyond
        # these wait to share a batch.
        self._in_flight = max(1, in_flight)
        self._max_batch = max_batch
        # Seconds a batch of several callers waits for any row lock.
        self.lock_timeout = lock_timeout
        # Callers retried alone after a lock timeout (kept referenced).
        self._alone: set[asyncio.Task[None]] = set()
        self._queue: list[_Entry[Row]] = []
        self._drains: set[asyncio.Task[None]] = set()
        # `queued`: an entry joined the queue (the queue's length);
        # `draining`: a batch is about to be taken (the queue's length).
        self.hooks: Hooks[int] = Hooks("queued", "draining")

    async def lease(self, runtime: str, count: int) -> list[Row]:
        """Up to `count` rows of `runtime`, leased in the next batch."""
        _, leased = await self._submit(None, runtime, count, one_statement=True)
        return leased

    async def run(
        self,
        part: Part[T],
        *,
        then_lease: str | None = None,
        one_statement: bool = False,
        merge: Merge[Any, T] | None = None,
    ) -> tuple[T, list[Row]]:
        """What `part` returned, once its batch committed, and the row leased
        after it (`then_lease`: a runtime) if any; or the part's own error.
        `one_statement`: the part is one statement (alone, no transaction).
        `merge`: how it may run merged with others in a batch (what the
        merged statement answers for it stands for what `part` returns)."""
        value, leased = await self._submit(
            part, then_lease, 1, one_statement=one_statement and then_lease is None, merge=merge
        )
        return value, leased

    async def _submit(
        self,
        part: Part[Any] | None,
        runtime: str | None,
        count: int,
        *,
        one_statement: bool,
        merge: Merge[Any, Any] | None = None,
    ) -> tuple[Any, list[Row]]:
        answer: asyncio.Future[tuple[Any, list[Row]]] = asyncio.get_running_loop().create_future()
        self._queue.append(_Entry(answer, part, runtime, count, one_statement, merge))
        if len(self._drains) < self._in_flight:
            self._drains.add(asyncio.create_task(self._drain_queue()))
        await self.hooks.queued(len(self._queue))
        # A caller that goes away cancels its answer: a batch not yet taken
        # skips it (a batch already running may lease for nobody; the lease
        # then expires and the reaper requeues the task, as before).
        return await answer

    async def _drain_queue(self) -> None:
        drain = asyncio.current_task()
        try:
            while self._queue:
                await self.hooks.draining(len(self._queue))
                taken = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                await self._settle([e for e in taken if not e.answer.done()])
        finally:
            # No await between finding the queue empty and leaving the set:
            # an entry queued after this drain looked starts a drain of its own.
            if drain is not None:
                self._drains.discard(drain)

    async def _settle(self, batch: list[_Entry[Row]]) -> None:
        """Runs a batch and answers its callers: each its own value or error."""
        try:
            if batch:
                await self._execute(batch)
        except asyncio.CancelledError:
            for entry in batch:
                entry.answer.cancel()
            raise
        except Exception as exc:  # nothing of the batch committed
            for entry in batch:
                _answer_error(entry, exc)
            return
        for entry in batch:
            if entry.retry_alone:
                entry.retry_alone = False
                self._retry_alone(entry)
            elif not entry.answer.done():  # done: its part failed, or its caller left
                entry.answer.set_result((entry.value, entry.leased))

    def _retry_alone(self, entry: _Entry[Row]) -> None:
        """A batch of its own, beside the drains: it may wait on its lock."""
        retry = asyncio.create_task(self._settle([entry] if not entry.answer.done() else []))
        self._alone.add(retry)
        retry.add_done_callback(self._alone.discard)

    async def _execute(self, batch: list[_Entry[Row]]) -> None:
        if len(batch) == 1 and batch[0].one_statement:
            await self._run_alone(batch[0])
            return
        runtimes = {entry.runtime for entry in batch}
        if len(runtimes) == 1 and all(entry.part is None for entry in batch):
            # Only leases of one runtime: one statement, no transaction.
            (runtime,) = runtimes
            assert runtime is not None
            count = sum(entry.count for entry in batch)
            _deal(await self._lease(self._pool, runtime, count), batch)
            return
        isolate = len(batch) > 1
        async with transaction(self._pool) as conn:
            if isolate:
                await conn.execute(f"SET LOCAL lock_timeout = {int(self.lock_timeout * 1000)}")
                await self._run_merged(conn, batch)
            wants: dict[str, list[_Entry[Row]]] = {}
            for entry in batch:
                ran = entry.merged or entry.part is None
                if not ran and not await self._run_part(conn, entry, isolate):
                    continue
                if entry.runtime is not None:
                    wants.setdefault(entry.runtime, []).append(entry)
            for runtime, asking in wants.items():
                await self._lease_for(conn, runtime, asking, isolate)

    async def _run_alone(self, entry: _Entry[Row]) -> None:
        """One lease, or one one-statement part: no transaction of our own."""
        if entry.part is None:
            assert entry.runtime is not None
            entry.leased = await self._lease(self._pool, entry.runtime, entry.count)
        else:
            entry.value = await entry.part(self._pool)

    async def _run_merged(self, conn: Connection, batch: list[_Entry[Row]]) -> None:
        """Each statement that two or more parts may merge into, once for
        all of them (in a savepoint: should it fail, they all run alone)."""
        groups: dict[Any, list[_Entry[Row]]] = {}
        for entry in batch:
            if entry.merge is not None:
                groups.setdefault(entry.merge.statement, []).append(entry)
        for statement, group in groups.items():
            if len(group) < 2:
                continue
            try:
                async with conn.transaction():
                    values = await statement(conn, [e.merge.arg for e in group if e.merge])
            except Exception:
                continue
            for entry, value in zip(group, values, strict=True):
                if value is not None:
                    entry.value, entry.merged = value, True

    async def _run_part(self, conn: Connection, entry: _Entry[Row], isolate: bool) -> bool:
        """True when the part succeeded; alone in the batch, its error is the batch's."""
        assert entry.part is not None
        if not isolate:
            entry.value = await entry.part(conn)
            return True
        try:
            async with conn.transaction():  # a savepoint
                entry.value = await entry.part(conn)
        except Exception as exc:
            if _lock_timed_out(exc):
                entry.retry_alone = True
            else:
                _answer_error(entry, exc)
            return False
        return True

    async def _lease_for(
        self, conn: Connection, runtime: str, asking: list[_Entry[Row]], isolate: bool
    ) -> None:
        """One lease statement for every caller asking `runtime`, its rows
        dealt out oldest first in arrival order."""
        count = sum(entry.count for entry in asking)
        if not isolate:
            rows = await self._lease(conn, runtime, count)
        else:
            try:
                async with conn.transaction():
                    rows = await self._lease(conn, runtime, count)
            except Exception as exc:
                # The parts stand: a lease caller sees the error (or, after
                # a lock timeout, is retried alone), an eager lease gets
                # nothing (as from a closing server).
                for entry in asking:
                    if entry.part is not None:
                        continue
                    if _lock_timed_out(exc):
                        entry.retry_alone = True
                    else:
                        _answer_error(entry, exc)
                return
        _deal(rows, asking)


def _deal(rows: list[Row], asking: list[_Entry[Row]]) -> None:
    """The rows of one lease statement, oldest first in arrival order."""
    at = 0
    for entry in asking:
        entry.leased, at = rows[at : at + entry.count], at + entry.count


def _lock_timed_out(exc: BaseException) -> bool:
    """The batch's lock_timeout ran out (55P03), as raised or translated."""
    return isinstance(exc, asyncpg.LockNotAvailableError) or isinstance(
        exc.__cause__, asyncpg.LockNotAvailableError
    )


def _answer_error(entry: _Entry[Row], exc: BaseException) -> None:
    if not entry.answer.done():
        entry.answer.set_exception(exc)
