"""The old rows of a JSON Lines file as an upsert's join needs them
(merge.py's `Old`): each line's key, and whole rows only for the lines
kept.

A line is parsed with orjson, and only its key's fields are converted;
the read's own parser (codec.py: the standard library's, floats as
Decimal) takes over for a line orjson refuses (a byte-order mark, NaN, an
integer past 64 bits, a lone surrogate), for a key holding a number that
is not an integer (orjson would round it to a float), and for every line
that is kept, which is decoded exactly as a read decodes it. A line that
is replaced is checked as far as the join needs (a JSON object, with no
field the written rows lack, a key of the key's types) and no further:
its values are dropped unread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Any

import orjson

from setu_engine.providers.files.codec import (
    MISSING,
    _decode,
    _dropped,
    _jsonl_cell,
    _parse_object,
    _Source,
)
from setu_engine.providers.files.merge import Old, key_bytes
from setu_engine.values.types import Column, Row

# What orjson decodes as the read's parser does (no float inside).
_EXACT = (str, int, bool, type(None))


async def jsonl_keyed(
    chunks: AsyncGenerator[list[bytes], None],
    source: _Source,
    columns: Sequence[Column],
    positions: list[int],
) -> AsyncGenerator[Old, None]:
    """The old file's lines, a chunk at a time, keyed (a rewrite's checks)."""
    number = 0
    async with aclosing(chunks):
        async for lines in chunks:
            yield await asyncio.to_thread(_keyed, lines, number, source, columns, positions)
            number += len(lines)


def line_keys(
    lines: Sequence[bytes], source: _Source, columns: Sequence[Column], positions: list[int]
) -> list[bytes]:
    """The key of each of a batch of written lines (rendered already, one
    record a line: write_json_lines), as the join matches them."""
    keys: list[bytes] = []
    _scan(lines, 1, source, columns, positions, keys, [])
    return keys


def _keyed(
    lines: list[bytes],
    before: int,
    source: _Source,
    columns: Sequence[Column],
    positions: list[int],
) -> Old:
    keys: list[bytes] = []
    held: list[tuple[int, bytes]] = []  # (line number, raw line) of each record
    _scan(lines, before + 1, source, columns, positions, keys, held)

    def rows(kept: list[int]) -> list[Row]:
        out: list[Row] = []
        for at in kept:
            number, raw = held[at]
            record = _parse_object(_decode(raw, number, source).strip(), source, number)
            out.append(
                tuple(_jsonl_cell(record.get(c.name, MISSING), c, source, number) for c in columns)
            )
        return out

    return Old(keys, rows)


def _scan(
    lines: Sequence[bytes],
    first: int,
    source: _Source,
    columns: Sequence[Column],
    positions: list[int],
    keys: list[bytes],
    held: list[tuple[int, bytes]],
) -> None:
    """Appends each record's key to keys, and (line number, line) to held."""
    if len(positions) == 1 and columns[positions[0]].type in _ONE_KEY_TYPES:
        _scan_one(lines, first, source, columns, positions[0], keys, held)
    else:
        _scan_each(lines, first, source, columns, positions, keys, held)


# A key of one column of these types is read by _scan_one.
_ONE_KEY_TYPES = frozenset({"smallint", "integer", "bigint", "text"})
_LIMITS = {"smallint": 2**15, "integer": 2**31, "bigint": 2**63}
_BIAS = 1 << 63


def _scan_one(
    lines: Sequence[bytes],
    first: int,
    source: _Source,
    columns: Sequence[Column],
    position: int,
    keys: list[bytes],
    held: list[tuple[int, bytes]],
) -> None:
    """_scan for a key of one integer or text column, in one loop: a line
    orjson parses into an object of the stream's fields whose key is an
    integer in the column's range (or, for text, a string) gives the key's
    bytes as key_bytes spells them; any other line goes through _scan_each,
    which decides (or names the fault) as before. A third of the cost."""
    wanted = {c.name for c in columns}
    name = columns[position].name
    limit = _LIMITS.get(columns[position].type)
    loads = orjson.loads
    for number, raw in enumerate(lines, first):
        key = None
        try:
            record = loads(raw)  # refuses a byte-order mark: _scan_each takes it
        except orjson.JSONDecodeError:
            record = None
        if type(record) is dict and record.keys() <= wanted:
            value = record.get(name)
            if limit is None:
                if type(value) is str:
                    key = b"s" + value.encode("utf-8", "surrogatepass")
            elif type(value) is int and -limit <= value < limit:
                key = b"i" + (value + _BIAS).to_bytes(8, "big")
        if key is None:
            _scan_each((raw,), number, source, columns, [position], keys, held)
        else:
            keys.append(key)
            held.append((number, raw))


def _scan_each(
    lines: Sequence[bytes],
    first: int,
    source: _Source,
    columns: Sequence[Column],
    positions: list[int],
    keys: list[bytes],
    held: list[tuple[int, bytes]],
) -> None:
    """_scan a line at a time, for any key."""
    wanted = {c.name for c in columns}
    keyed = [columns[i] for i in positions]
    names = [c.name for c in keyed]
    where = list(range(len(keyed)))
    for number, raw in enumerate(lines, first):
        record = _fast(raw, names) if number > 1 else None
        if record is None:
            text = _decode(raw, number, source).strip()
            if not text:
                continue
            record = _parse_object(text, source, number)
        if not record.keys() <= wanted:
            raise _dropped(source, sorted(record.keys() - wanted))
        key = tuple(_jsonl_cell(record.get(c.name, MISSING), c, source, number) for c in keyed)
        keys.append(key_bytes(key, where))
        held.append((number, raw))


def _fast(raw: bytes, names: list[str]) -> dict[str, Any] | None:
    """The line's record by orjson, or None where the read's parser must
    decide (or the line is blank)."""
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict):
        return None
    for name in names:
        if not isinstance(record.get(name), _EXACT):
            return None
    return record
