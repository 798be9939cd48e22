"""The old rows of a JSON Lines file as an upsert's join reads them
(setu_engine/providers/files/keyed.py): keys decoded as a read decodes
them whatever orjson would make of the line, kept rows decoded whole and
exactly, and the rewrite's checks kept."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from decimal import Decimal

import pytest

from setu_engine.errors import ProviderError, ValueFault
from setu_engine.providers.files.codec import _Source
from setu_engine.providers.files.keyed import jsonl_keyed, line_keys
from setu_engine.providers.files.merge import Old, key_bytes
from setu_engine.values.types import Column

SOURCE = _Source("old.jsonl", "old")
COLUMNS = [Column("id", "numeric"), Column("price", "numeric"), Column("ratio", "double")]


async def chunks(*parts: list[bytes]) -> AsyncGenerator[list[bytes], None]:
    for part in parts:
        yield part


async def keyed(*parts: list[bytes]) -> list[Old]:
    return [old async for old in jsonl_keyed(chunks(*parts), SOURCE, COLUMNS, [0])]


def key(value: object) -> bytes:
    return key_bytes((value,), [0])


async def test_a_key_that_is_not_an_integer_is_decoded_as_a_read_decodes_it() -> None:
    # orjson would read 1.10 as the float 1.1; the read's parser, as Decimal.
    (old,) = await keyed([b'{"id": 0}\n', b'{"id": 1.10, "price": 2}\n', b'{"id": 7}\n'])
    assert old.keys == [key(Decimal(0)), key(Decimal("1.1")), key(Decimal(7))]


async def test_kept_rows_are_decoded_whole_and_exactly() -> None:
    lines = [
        "\ufeff".encode() + b'{"id": 1, "price": 0.10, "ratio": 0.1}\n',
        b"\n",
        # An integer past 64 bits: orjson refuses the line.
        b'{"id": 2, "price": 123456789012345678901234567890, "ratio": "NaN"}\n',
        b'{"id": 3, "price": 1}\n',
    ]
    (old,) = await keyed(lines)
    assert len(old.keys) == 3  # the blank line is no record
    first, second = old.rows([0, 1])
    assert first == (Decimal(1), Decimal("0.10"), 0.1)
    assert second[:2] == (Decimal(2), Decimal("123456789012345678901234567890"))
    assert second[2] != second[2]  # NaN
    assert old.rows([2]) == [(Decimal(3), Decimal(1), None)]


async def test_line_numbers_run_on_across_chunks() -> None:
    with pytest.raises(ValueFault) as caught:
        await keyed([b'{"id": 1}\n', b'{"id": 2}\n'], [b'{"id": "x"}\n'])
    assert "line 3" in str(caught.value)


async def test_a_field_the_written_rows_lack_is_refused_in_a_replaced_line_too() -> None:
    with pytest.raises(ProviderError, match="extra"):
        await keyed([b'{"id": 1}\n', b'{"id": 2, "extra": true}\n'])


def test_written_lines_key_as_old_lines_do() -> None:
    lines = [b'{"id": 5, "ratio": 1.5}\n', b'{"id": 5.0}\n', b'{"id": "6"}\n']
    assert line_keys(lines, SOURCE, COLUMNS, [0]) == [key(Decimal(5))] * 2 + [key(Decimal(6))]
