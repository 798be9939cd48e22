"""Incremental reads as the provider declares them (capabilities.increments,
setu_engine/planning/incremental.py): by a cursor column's high value
(`cursor_high`, then a read in the window: after the saved value under
append, from it under upsert, nothing when nothing is newer), or by object
(a file read again only when it changed); None refuses an incremental spec."""

from __future__ import annotations

import pytest

from setu_engine.errors import ConfigError
from setu_engine.kinds import WriteMode
from setu_engine.planning.incremental import windows
from setu_engine.providers.base import Connector
from setu_engine.support.closing import closing
from setu_engine.values.types import Column, Row, Stream, find_stream, qualified
from tests.conformance.harness import Place
from tests.conformance.support import write

COLUMNS = [Column("id", "bigint", nullable=False), Column("name", "text"), Column("seq", "bigint")]
FIRST = [(1, "a", 10), (2, "b", 20), (3, "c", 30)]
LATER = [(4, "d", 40), (5, "e", 50)]


async def read(connector: Connector, stream: Stream) -> list[Row]:
    async with closing(connector.read(stream, 2)) as reading:
        rows = [row async for batch in reading for row in batch]
    return sorted(rows)


async def test_an_incremental_read_reads_what_is_new(place: Place) -> None:
    await write(place, "events", COLUMNS, FIRST, WriteMode.OVERWRITE)
    increments = place.capabilities.increments
    connector = await place.connect()
    try:
        stream = find_stream(await connector.discover(), "events")
        if increments == "cursor":
            await cursor_reads(place, connector, stream)
        elif increments == "object":
            await object_reads(place, connector, stream)
        else:
            spec = {"sync": {stream.name: {"cursor": "seq"}}}
            with pytest.raises(ConfigError, match="incremental"):
                await windows(connector, [stream], spec, {}, "append")
    finally:
        await connector.close()


async def cursor_reads(place: Place, connector: Connector, stream: Stream) -> None:
    spec = {"sync": {stream.name: {"cursor": "seq"}}}
    (delta,) = await windows(connector, [stream], spec, {}, "append")
    assert delta.stream.since is not None
    assert (delta.stream.since.high, delta.rows) == ("30", 3)
    assert await read(connector, delta.stream) == FIRST
    await write(place, "events", COLUMNS, LATER, WriteMode.APPEND)
    saved = {qualified(stream): "30"}
    (delta,) = await windows(connector, [stream], spec, saved, "append")
    assert delta.stream.since is not None
    assert (delta.stream.since.high, delta.rows) == ("50", 2)
    assert await read(connector, delta.stream) == LATER
    # Under upsert the saved value itself is read again (applied once).
    (delta,) = await windows(connector, [stream], spec, saved, "upsert")
    assert delta.rows == 3
    assert await read(connector, delta.stream) == [FIRST[2], *LATER]
    (delta,) = await windows(connector, [stream], spec, {qualified(stream): "50"}, "append")
    assert delta.stream.since is not None and delta.stream.since.empty
    assert await read(connector, delta.stream) == []


async def object_reads(place: Place, connector: Connector, stream: Stream) -> None:
    spec = {"sync": {stream.name: "incremental"}}
    (delta,) = await windows(connector, [stream], spec, {}, "append")
    assert delta.stream.since is not None and delta.stream.since.mark is not None
    assert await read(connector, delta.stream) == FIRST
    saved = {qualified(stream): delta.stream.since.mark.value}
    assert await windows(connector, [stream], spec, saved, "append") == [], "unchanged: not read"
    await write(place, "events", COLUMNS, LATER, WriteMode.APPEND)
    (delta,) = await windows(connector, [stream], spec, saved, "append")
    assert await read(connector, delta.stream) == FIRST + LATER
