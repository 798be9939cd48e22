"""COPY … TO STDOUT of a query, whole or split into batches as it arrives:
the one pump behind the binary parts (copy_out), the CSV hand-off (csv.py)
and JSON Lines (json.py's text COPY)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Literal, Protocol

import asyncpg

from setu_engine.kinds import CopyBatch

Format = Literal["binary", "csv", "text"]

# Chunks of a split COPY held while the batches before are written.
QUEUE = 64


class Splitter(Protocol):
    """Cuts a COPY's chunks at record boundaries (pgcopy_split.CopySplitter,
    csv.CsvSplitter)."""

    def feed(self, chunk: bytes) -> Iterable[CopyBatch]: ...

    def finish(self) -> CopyBatch | None: ...


def count(status: str) -> int:
    """Rows of a command status such as 'COPY 12' or 'INSERT 0 12'."""
    try:
        return int(status.rsplit(" ", 1)[-1])
    except ValueError:
        return 0


async def copy_whole(conn: asyncpg.Connection, query: str, fmt: Format) -> tuple[bytes, int]:
    """One COPY of `query`: its bytes and its rows."""
    chunks: list[bytes] = []

    async def sink(chunk: bytes) -> None:
        chunks.append(chunk)

    status = await conn.copy_from_query(query, output=sink, format=fmt)
    return b"".join(chunks), count(status)


async def copy_split(
    conn: asyncpg.Connection, query: str, fmt: Format, splitter: Splitter
) -> AsyncIterator[CopyBatch]:
    """One COPY of `query`, in the batches `splitter` cuts as it arrives; a
    bounded queue holds the COPY back while the batches before are loaded."""
    chunks: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=QUEUE)

    async def sink(chunk: bytes) -> None:
        await chunks.put(bytes(chunk))

    async def pump() -> None:
        try:
            await conn.copy_from_query(query, output=sink, format=fmt)
        finally:
            await chunks.put(None)

    copying = asyncio.create_task(pump())
    try:
        while (chunk := await chunks.get()) is not None:
            for batch in splitter.feed(chunk):
                yield batch
        await copying  # raises what the COPY raised
        if (last := splitter.finish()) is not None:
            yield last
    finally:
        # Closed early (a cancel, a failed write): the COPY stops, and its
        # outcome is consumed here, never left for the loop to log.
        copying.cancel()
        await asyncio.gather(copying, return_exceptions=True)
