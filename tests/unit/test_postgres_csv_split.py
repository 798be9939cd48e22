"""A CSV COPY cut into batches as it arrives (setu_engine/providers/postgres/csv.py):
each batch holds whole records and says how many, wherever the chunks
break and whatever the quoted fields hold (newlines, quotes, commas)."""

from __future__ import annotations

import csv
import io
import random

import pytest

from setu_engine.kinds import CopyBatch
from setu_engine.providers.postgres.csv import CsvSplitter

FIELDS = ["a", "", 'x"y', "p\nq", "r,s", '"\n"', "\n", None]


def _spelled(value: str | None) -> str:
    if value is None:
        return ""
    if value == "" or any(c in value for c in ',"\n'):
        return '"' + value.replace('"', '""') + '"'
    return value


@pytest.mark.parametrize("seed", range(40))
def test_batches_hold_whole_records_wherever_chunks_break(seed: int) -> None:
    rng = random.Random(seed)
    rows = [[rng.choice(FIELDS) for _ in range(3)] for _ in range(rng.randint(0, 60))]
    data = b"".join((",".join(map(_spelled, r)) + "\n").encode() for r in rows)
    splitter = CsvSplitter(rng.randint(1, 7))
    batches: list[CopyBatch] = []
    at = 0
    while at < len(data):
        size = rng.randint(1, 12)
        batches += splitter.feed(data[at : at + size])
        at += size
    if (last := splitter.finish()) is not None:
        batches.append(last)
    assert b"".join(bytes(b.data) for b in batches) == data
    for batch in batches:
        parsed = list(csv.reader(io.StringIO(bytes(batch.data).decode(), newline="")))
        assert len(parsed) == batch.rows
    assert sum(b.rows for b in batches) == len(rows)


def test_a_copy_ending_inside_a_quoted_field_is_refused() -> None:
    splitter = CsvSplitter(10)
    splitter.feed(b'1,"open\n')
    with pytest.raises(ValueError, match="inside a record"):
        splitter.finish()
