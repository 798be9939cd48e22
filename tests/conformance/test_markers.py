"""Exactly-once loads (setu_engine/staged/markers.py): a write with a marker
records it with its rows; the same write again writes nothing and answers
the rows recorded, in every mode; another run's marker is another load; a
failed write leaves no marker, so its retry loads."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from setu_engine.kinds import WriteMode
from setu_engine.staged.markers import LoadMarker
from setu_engine.values.types import Batch
from tests.conformance.harness import Place
from tests.conformance.support import PEOPLE, marker, read_back, write

ROWS = [(1, "a"), (2, "b"), (3, "c")]


@pytest.mark.parametrize("mode", list(WriteMode))
async def test_a_repeated_load_writes_nothing(place: Place, mode: WriteMode) -> None:
    mark = marker("people")
    assert int(await write(place, "people", PEOPLE, ROWS, mode, marker=mark)) == 3
    again = await write(place, "people", PEOPLE, [(9, "again")], mode, marker=mark)
    assert int(again) == 3, "answers the rows the marker recorded"
    assert await read_back(place, "people") == ROWS
    other = LoadMarker(str(uuid.uuid4()), "people")
    assert int(await write(place, "people", PEOPLE, [(4, "d")], mode, marker=other)) == 1
    assert (4, "d") in await read_back(place, "people")


async def broken(rows: Batch) -> AsyncIterator[Batch]:
    yield rows
    raise RuntimeError("the source broke")


async def test_a_failed_load_leaves_no_marker(place: Place) -> None:
    mark = marker("people")
    await write(place, "people", PEOPLE, ROWS[:1], WriteMode.OVERWRITE)
    connector = await place.connect()
    try:
        with pytest.raises(RuntimeError, match="the source broke"):
            await connector.write(
                "people", PEOPLE, broken(ROWS[1:]), WriteMode.APPEND, ["id"], marker=mark
            )
    finally:
        await connector.close()
    assert await read_back(place, "people") == ROWS[:1]
    assert int(await write(place, "people", PEOPLE, ROWS[1:], WriteMode.APPEND, marker=mark)) == 2
    assert await read_back(place, "people") == ROWS
