"""Cancel mid-write and mid-read leaves nothing behind. The write's rows
come from a generator that waits on an event after its first batch, and the
test cancels the write there (a hook, never a sleep): the target keeps its
rows and its shape, and no staging table or temporary file is left. A read
cancelled after its first batch releases its session: the same connector
still previews, and another one overwrites the table."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from setu_engine.kinds import WriteMode
from setu_engine.support.closing import closing
from setu_engine.values.types import Batch, find_stream
from tests.conformance.harness import Place
from tests.conformance.support import PEOPLE, discovered, read_back, write

BEFORE = [(1, "a"), (2, "b")]


async def reached(event: asyncio.Event, task: asyncio.Task[object]) -> None:
    """Until the event is set; the task's own failure if it ends first."""
    waiter = asyncio.ensure_future(event.wait())
    await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
    if not event.is_set():
        waiter.cancel()
        await task  # raises what ended it
        raise AssertionError("the task ended before the hook was reached")


@pytest.mark.parametrize("mode", list(WriteMode))
async def test_a_write_cancelled_mid_stream_leaves_nothing(place: Place, mode: WriteMode) -> None:
    await write(place, "people", PEOPLE, BEFORE, WriteMode.OVERWRITE)
    shape = await discovered(place, "people")
    objects = await place.objects()
    first, never = asyncio.Event(), asyncio.Event()

    async def held() -> AsyncIterator[Batch]:
        yield [(3, "c"), *([(2, "B")] if mode.needs_key else [])]
        first.set()
        await never.wait()
        yield [(4, "d")]

    connector = await place.connect()
    try:
        task = asyncio.create_task(connector.write("people", PEOPLE, held(), mode, ["id"]))
        await reached(first, task)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await connector.close()
    assert await read_back(place, "people") == BEFORE
    assert await discovered(place, "people") == shape
    assert await place.objects() == objects, "nothing left behind"


async def test_a_read_cancelled_mid_stream_releases_its_session(place: Place) -> None:
    rows = [(i, f"name {i}") for i in range(1, 11)]
    await write(place, "people", PEOPLE, rows, WriteMode.OVERWRITE)
    first, never = asyncio.Event(), asyncio.Event()
    connector = await place.connect()
    try:
        stream = find_stream(await connector.discover(), "people")

        async def reading() -> None:
            async with closing(connector.read(stream, 2)) as batches:
                async for _ in batches:
                    first.set()
                    await never.wait()

        task = asyncio.create_task(reading())
        await reached(first, task)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(await connector.preview(stream, 3)) == 3
        # Another session rewrites the table the cancelled read was on: a
        # transaction or lock the read kept would hold it up.
        async with asyncio.timeout(60):
            await write(place, "people", PEOPLE, rows[:1], WriteMode.OVERWRITE)
    finally:
        await connector.close()
    assert await read_back(place, "people") == rows[:1]
