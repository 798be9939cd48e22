"""Each write mode with the exact RowChanges it reports (kinds.changes_of)
and the rows it leaves: on a table holding ids 1-3, upsert and merge of
(2 unchanged, 3 changed, 4 new) and an append of (4, 5) new. A provider
that reports no changes under a mode declares it
(capabilities.reports_changes) and the suite checks it answers rows only."""

from __future__ import annotations

import pytest

from setu_engine.kinds import RowChanges, WriteMode, changes_of
from tests.conformance.harness import Place
from tests.conformance.support import PEOPLE, read_back, write

BEFORE = [(1, "a"), (2, "b"), (3, "c")]
INCOMING = [(2, "b"), (3, "C"), (4, "d")]
CASES = {
    WriteMode.APPEND: (
        [(4, "d"), (5, "e")],
        RowChanges(inserted=2),
        [*BEFORE, (4, "d"), (5, "e")],
    ),
    WriteMode.OVERWRITE: (INCOMING, RowChanges(inserted=3), INCOMING),
    WriteMode.UPSERT: (
        INCOMING,
        RowChanges(inserted=1, updated=1, unchanged=1),
        [(1, "a"), (2, "b"), (3, "C"), (4, "d")],
    ),
    WriteMode.MERGE: (
        INCOMING,
        RowChanges(inserted=1, updated=1, unchanged=1, deleted=1),
        [(2, "b"), (3, "C"), (4, "d")],
    ),
}


@pytest.mark.parametrize("mode", list(WriteMode))
async def test_a_write_mode_reports_its_changes_and_lands_its_rows(
    place: Place, mode: WriteMode
) -> None:
    rows, changes, after = CASES[mode]
    await write(place, "people", PEOPLE, BEFORE, WriteMode.OVERWRITE)
    written = await write(place, "people", PEOPLE, rows, mode)
    assert int(written) == len(rows)
    if mode.value in place.capabilities.reports_changes:
        assert changes_of(written) == changes
    else:
        assert changes_of(written) is None, f"{mode} reports changes: declare it"
    assert await read_back(place, "people") == after


async def test_a_write_into_a_new_stream_creates_it(place: Place) -> None:
    for mode in WriteMode:
        stream = f"new_{mode.value}"
        written = await write(place, stream, PEOPLE, BEFORE, mode)
        if mode.value in place.capabilities.reports_changes:
            assert changes_of(written) == RowChanges(inserted=3), mode
        assert await read_back(place, stream) == BEFORE, mode
