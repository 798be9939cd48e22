"""File upsert and merge through the on-disk spill (files_merge): the last
written row of a key wins in its first key's place, an old row is replaced
in place, a key the old file holds twice keeps only its first place, and
the spill's temporary database is gone afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from decimal import Decimal
from pathlib import Path

from setu_agent.engine.providers import files_merge
from setu_agent.engine.types import Batch, Row


async def batches(*parts: Batch) -> AsyncGenerator[Batch, None]:
    for part in parts:
        yield part


async def merged(old: list[Batch], written: list[Batch], keep_old: bool) -> list[Row]:
    out: list[Row] = []

    async def write(rows: Batch) -> None:
        out.extend(rows)

    spill = await files_merge.spill(batches(*written), [0])
    folder = Path(spill._dir.name)
    try:
        await files_merge.merge(write, batches(*old), spill, [0], keep_old)
        assert spill.count == sum(len(b) for b in written)
    finally:
        spill.close()
    assert not await asyncio.to_thread(folder.exists)
    return out


OLD = [[(1, "old one"), (2, "old two")], [(3, "old three"), (2, "old two again")]]
WRITTEN = [[(5, "new five"), (2, "new two")], [(4, "new four"), (5, "new five, last")]]


async def test_upsert_replaces_in_place_keeps_the_rest_and_appends_new_keys_in_order() -> None:
    assert await merged(OLD, WRITTEN, keep_old=True) == [
        (1, "old one"),
        (2, "new two"),
        (3, "old three"),
        (5, "new five, last"),
        (4, "new four"),
    ]


async def test_merge_keeps_only_the_written_keys() -> None:
    assert await merged(OLD, WRITTEN, keep_old=False) == [
        (2, "new two"),
        (5, "new five, last"),
        (4, "new four"),
    ]


async def test_keys_that_compare_equal_match_across_spellings() -> None:
    old = [[(Decimal("1.0"), "old")]]
    written = [[(Decimal("1.00"), "new")]]
    out: list[Row] = []

    async def write(rows: Batch) -> None:
        out.extend(rows)

    spill = await files_merge.spill(batches(*written), [0])
    try:
        await files_merge.merge(write, batches(*old), spill, [0], True)
    finally:
        spill.close()
    assert out == [(Decimal("1.00"), "new")]
