"""Each write mode with the exact RowChanges it reports (kinds.changes_of)
and the rows it leaves: on a table holding ids 1-3 and 5-7, upsert and
merge of (2 unchanged, 3 changed, 4 new, 5 NULL → a value, 6 a value →
NULL, 7 NULL → NULL unchanged) and an append of (4, 8) new. The NULL cases
catch a comparison by `<>`, under which NULL differs from nothing. A
provider that reports no changes under a mode declares it
(capabilities.reports_changes) and the suite checks it answers rows only."""

from __future__ import annotations

import pytest

from setu_engine.kinds import RowChanges, WriteMode, changes_of
from tests.conformance.harness import Place
from tests.conformance.support import PEOPLE, read_back, write

BEFORE = [(1, "a"), (2, "b"), (3, "c"), (5, None), (6, "f"), (7, None)]
INCOMING = [(2, "b"), (3, "C"), (4, "d"), (5, "e"), (6, None), (7, None)]
CASES = {
    WriteMode.APPEND: (
        [(4, "d"), (8, None)],
        RowChanges(inserted=2),
        sorted([*BEFORE, (4, "d"), (8, None)]),
    ),
    WriteMode.OVERWRITE: (INCOMING, RowChanges(inserted=6), INCOMING),
    WriteMode.UPSERT: (
        INCOMING,
        RowChanges(inserted=1, updated=3, unchanged=2),
        [(1, "a"), *INCOMING],
    ),
    WriteMode.MERGE: (
        INCOMING,
        RowChanges(inserted=1, updated=3, unchanged=2, deleted=1),
        INCOMING,
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
            assert changes_of(written) == RowChanges(inserted=len(BEFORE)), mode
        assert await read_back(place, stream) == BEFORE, mode
