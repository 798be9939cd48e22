"""File upsert and merge through the on-disk spill
(setu_engine/providers/files/merge.py): the last
written row of a key wins in its first key's place, an old row is replaced
in place, a key the old file holds twice keeps only its first place, and
the spill's temporary database is gone afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from decimal import Decimal
from pathlib import Path

import pytest

from setu_engine.errors import ValueFault
from setu_engine.kinds import CopyBatch
from setu_engine.providers.files import encode as files_encode
from setu_engine.providers.files import merge as files_merge
from setu_engine.values.types import Batch, Column, Row


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


async def merged_lines(
    old: list[Batch], written: list[Batch], keep_old: bool, fmt: str
) -> tuple[bytes, int]:
    """The merge of a text format: the spill holds encoded lines, and the
    merge writes bytes (old rows kept are encoded alike)."""
    columns = [Column("id", "bigint"), Column("name", "text")]
    out: list[CopyBatch] = []

    async def write_lines(lines: CopyBatch) -> None:
        out.append(lines)

    async def write_rows(rows: Batch) -> None:
        raise AssertionError("a line spill writes lines only")

    lines = files_merge.Lines(files_encode.line_encoder(columns, fmt), write_lines)
    spill = await files_merge.spill(batches(*written), [0], lines)
    try:
        await files_merge.merge(write_rows, batches(*old), spill, [0], keep_old)
    finally:
        spill.close()
    return b"".join(part.data for part in out), sum(part.rows for part in out)


@pytest.mark.parametrize("keep_old", [True, False])
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
async def test_a_text_format_spills_lines_and_merges_as_rows_do(fmt: str, keep_old: bool) -> None:
    rows = await merged(OLD, WRITTEN, keep_old)
    expected = files_encode.line_encoder([Column("id", "bigint"), Column("name", "text")], fmt)
    data, count = await merged_lines(OLD, WRITTEN, keep_old, fmt)
    assert data == b"".join(expected(rows))
    assert count == len(rows)


async def test_a_csv_line_with_a_quoted_newline_stays_one_row() -> None:
    old = [[(1, "old")]]
    written = [[(1, "two\nlines, quoted"), (2, 'a "quote"')]]
    data, count = await merged_lines(old, written, True, "csv")
    assert data == b'1,"two\nlines, quoted"\n2,"a ""quote"""\n'
    assert count == 2


async def test_a_value_the_encoder_refuses_names_its_row_across_batches() -> None:
    columns = [Column("id", "bigint"), Column("name", "text")]

    async def write_lines(lines: CopyBatch) -> None:
        pass

    lines = files_merge.Lines(files_encode.line_encoder(columns, "jsonl"), write_lines)
    written: list[Batch] = [[(1, "a"), (2, "b")], [(3, object())]]
    with pytest.raises(ValueFault) as caught:
        await files_merge.spill(batches(*written), [0], lines)
    assert (caught.value.column, caught.value.row) == ("name", 3)
