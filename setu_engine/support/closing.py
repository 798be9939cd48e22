"""Async iterators closed by the code that consumes them.

A reader is an async generator holding something open (a cursor, a read
transaction, a COPY, a prefetch). One whose consumer stopped midway (a
cancel raised at a batch, a failed write, a stop) stays suspended until
something closes it: left alone, that is the garbage collector or the
loop's shutdown, minutes later, after its connection was closed, and its
`finally` fails there ("an error occurred during closing of asynchronous
generator", or "Task exception was never retrieved" with the closed
connection's error). So every engine function that iterates a generator
does it inside `closing(...)`: a stream's readers close, innermost last,
as its transfer unwinds, before its connections are released.

A ground-floor module: it imports nothing of the engine.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")


@contextlib.asynccontextmanager
async def closing(items: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """`items`, closed (`aclose`, when it has one) however the block ends;
    closing one already finished, or never started, does nothing."""
    try:
        yield items
    finally:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()
