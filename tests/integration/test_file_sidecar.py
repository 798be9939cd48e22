"""Files keep their types (issue 26): without a declared column, inference
never turns an exact decimal into a float."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from setu_engine.providers.files import PROVIDER


async def test_jsonl_inference_keeps_a_big_decimal_exact(tmp_path: Path) -> None:
    """A JSON number a double cannot hold infers numeric, read as its exact
    digits; numbers a double holds exactly still infer double."""
    (tmp_path / "money.jsonl").write_text(
        '{"big": 12345678901234567890.123456789, "small": 0.5, "huge": 1e400}\n'
        '{"big": 1.5, "small": 2, "huge": 1}\n'
    )
    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "jsonl"})
    try:
        (stream,) = await connector.discover()
        types = {c.name: c.type for c in stream.columns}
        assert types == {"big": "numeric", "small": "double", "huge": "numeric"}
        rows = [row async for batch in connector.read(stream, 10) for row in batch]
    finally:
        await connector.close()
    assert rows[0][0] == Decimal("12345678901234567890.123456789")
    assert str(rows[0][0]) == "12345678901234567890.123456789"
    assert rows[0][2] == Decimal("1e400")


async def test_csv_inference_keeps_a_big_decimal_exact(tmp_path: Path) -> None:
    """CSV infers a decimal numeric (exact), an integer past bigint numeric."""
    (tmp_path / "money.csv").write_text(
        "big,wide\n12345678901234567890.123456789,99999999999999999999\n1.5,1\n"
    )
    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "csv"})
    try:
        (stream,) = await connector.discover()
        assert [c.type for c in stream.columns] == ["numeric", "numeric"]
        rows = [row async for batch in connector.read(stream, 10) for row in batch]
    finally:
        await connector.close()
    assert str(rows[0][0]) == "12345678901234567890.123456789"
    assert rows[0][1] == Decimal("99999999999999999999")
