"""A binary COPY stream cut into batches at tuple boundaries, whatever the
size of the chunks it arrives in (setu_engine/staged/pgcopy_split.py)."""

from __future__ import annotations

import pytest

from setu_engine.staged import pgcopy
from setu_engine.staged.pgcopy_split import CopySplitter
from setu_engine.values.types import Column, Row

COLUMNS = (Column("id", "bigint", False), Column("note", "text", True))
ROWS = [(i, None if i % 3 == 0 else "x" * (i % 7)) for i in range(1, 12)]


def split(data: bytes, chunk: int, batch_rows: int) -> list[Row]:
    splitter = CopySplitter(batch_rows)
    batches = []
    for start in range(0, len(data), chunk):
        batches.extend(splitter.feed(data[start : start + chunk]))
    if (last := splitter.finish()) is not None:
        batches.append(last)
    assert [b.rows for b in batches[:-1]] == [batch_rows] * (len(batches) - 1)
    rows: list[Row] = []
    for batch in batches:
        part = pgcopy.decode(COLUMNS, batch.data)
        assert len(part) == batch.rows > 0
        rows.extend(part)
    return rows


@pytest.mark.parametrize("batch_rows", [1, 4, 11, 100])
def test_every_chunking_gives_whole_batches_of_the_same_rows(batch_rows: int) -> None:
    data = pgcopy.encode(COLUMNS, ROWS)
    for chunk in range(1, len(data) + 1):
        assert split(data, chunk, batch_rows) == ROWS, chunk


def test_an_empty_stream_gives_no_batch() -> None:
    assert split(pgcopy.encode(COLUMNS, []), 3, 4) == []


def test_a_stream_without_its_trailer_or_signature_is_refused() -> None:
    data = pgcopy.encode(COLUMNS, ROWS)
    cut = CopySplitter(4)
    cut.feed(data[: -len(pgcopy.TRAILER)])
    with pytest.raises(ValueError, match="without its trailer"):
        cut.finish()
    with pytest.raises(ValueError, match="not a binary COPY"):
        CopySplitter(4).feed(b"id,note\n" * 4)
