"""Readers are closed by their consumers (setu_engine/support/closing.py): a
consumer that stops midway (a cancel raised at a batch) closes the reader
it iterates at once, through read_ahead's producer too, so nothing is left
for the garbage collector or the loop's shutdown to close after the
reader's connection was closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import pytest

from setu_engine.movement.transfer import _copy_batches, read_ahead
from setu_engine.providers.base import Connector
from setu_engine.support.closing import closing
from setu_engine.values.types import Batch, Column, Stream


class Cancelled(Exception):
    """What a reporter raises at a batch when the job asked to cancel."""


class Source:
    """A reader that says when its `finally` (a cursor's close) ran."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()
        self.read = 0

    async def batches(self) -> AsyncIterator[int]:
        try:
            for number in range(100):
                self.read += 1
                yield number
        finally:
            self.closed.set()


async def test_a_consumer_that_stops_closes_the_reader_through_read_ahead() -> None:
    source = Source()
    with pytest.raises(Cancelled):
        async with closing(read_ahead(source.batches())) as batches:
            async for number in batches:
                if number == 2:
                    raise Cancelled
    # Closed by the time the block is left: not later, by the GC.
    assert source.closed.is_set()
    assert source.read < 100


class RowSource:
    """A connector's read, as the engine sees it (rows in batches)."""

    def __init__(self) -> None:
        self.source = Source()

    async def read(self, stream: Stream, batch_rows: int) -> AsyncIterator[Batch]:
        async with closing(self.source.batches()) as numbers:
            async for number in numbers:
                yield [(number,)]


async def test_staging_a_read_closes_the_connectors_reader_when_it_stops() -> None:
    """_copy_batches (what an extract stages) closes the connector's read."""
    connector = RowSource()
    stream = Stream("t", (Column("id", "integer"),))
    copies = _copy_batches(cast(Connector, connector), stream, 1)
    async with closing(copies) as batches:
        async for batch in batches:
            assert batch.rows == 1
            break
    assert connector.source.closed.is_set()
    assert connector.source.read == 1
