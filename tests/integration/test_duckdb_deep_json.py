"""A DuckDB file a tenant made holds a JSON value nested deeper than
Python's decoder goes: reading it is a ValueFault naming the column, not
an unclassified RecursionError."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from setu_engine.errors import ValueFault
from setu_engine.providers import get_provider

pytestmark = pytest.mark.asyncio


async def test_json_nested_past_the_decoder_is_a_value_fault(tmp_path: Path) -> None:
    path = tmp_path / "deep.duckdb"
    with duckdb.connect(str(path)) as made:
        made.execute("CREATE TABLE j (id integer PRIMARY KEY, v JSON)")
        made.execute("INSERT INTO j VALUES (1, ?)", ["[" * 100_000 + "]" * 100_000])
    connector = await get_provider("duckdb").connect({"path": str(path)})
    try:
        (stream,) = [s for s in await connector.discover() if s.name == "j"]
        with pytest.raises(ValueFault) as caught:
            async for _ in connector.read(stream, 10):
                pass
        assert caught.value.column == "v"
    finally:
        await connector.close()
