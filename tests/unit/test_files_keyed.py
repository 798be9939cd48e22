"""The old rows of a JSON Lines file as an upsert's join reads them
(setu_engine/providers/files/keyed.py): keys decoded as a read decodes
them whatever orjson would make of the line, kept rows decoded whole and
exactly, and the rewrite's checks kept."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from setu_engine.errors import ProviderError, ValueFault
from setu_engine.providers.files import keyed as keyed_module
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


# Lines for the one-column fast path (_scan_one) to agree with the line by
# line one (_scan_each) on: keys in and out of each integer type's range,
# booleans, floats, strings, escapes orjson refuses, a missing key, a field
# the stream lacks, a line that is no object, a blank one, a first line
# with a byte-order mark.
_KEY_VALUES = st.one_of(
    st.integers(-(2**64), 2**64),
    st.sampled_from([2**15, -(2**15) - 1, 2**31, 2**63, -(2**63), True, 1.5, 2.0, None]),
    st.text(max_size=4),
    st.sampled_from(['"\\ud800"', '"a\\u0000b"', "NaN", '"12"']),
)


@st.composite
def _lines(draw: st.DrawFn) -> list[bytes]:
    out = []
    for value in draw(st.lists(_KEY_VALUES, max_size=6)):
        text = value if isinstance(value, str) and value[:1] in '"N' else json.dumps(value)
        shape = draw(st.sampled_from(["plain", "missing", "extra", "array", "blank"]))
        line = {
            "plain": f'{{"v": 1, "id": {text}}}',
            "missing": '{"v": 2}',
            "extra": f'{{"id": {text}, "other": 3}}',
            "array": f"[{text}]",
            "blank": "  ",
        }[shape]
        out.append(line.encode("utf-8", "surrogatepass"))
    bom: bool = draw(st.booleans())
    if out and bom:
        out[0] = b"\xef\xbb\xbf" + out[0]
    return out


def _outcome(scan: Any) -> Any:
    """What a scan made of the lines: the keys and lines held, or its error
    (with what it held before it)."""
    keys: list[bytes] = []
    held: list[tuple[int, bytes]] = []
    try:
        scan(keys, held)
    except Exception as exc:
        return type(exc), str(exc), keys, held
    return keys, held


@pytest.mark.parametrize("type_", ["smallint", "integer", "bigint", "text"])
@settings(max_examples=150, deadline=None)
@given(lines=_lines())
def test_a_one_column_key_is_read_as_the_line_by_line_scan_reads_it(
    type_: str, lines: list[bytes]
) -> None:
    columns = [Column("id", type_), Column("v", "integer")]
    fast = _outcome(
        lambda keys, held: keyed_module._scan_one(lines, 1, SOURCE, columns, 0, keys, held)
    )
    each = _outcome(
        lambda keys, held: keyed_module._scan_each(lines, 1, SOURCE, columns, [0], keys, held)
    )
    assert fast == each
