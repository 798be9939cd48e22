"""Files keep their types (issue 26): without a declared column, inference
never turns an exact decimal into a float."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

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


async def test_parquet_keeps_the_primary_key_in_its_metadata(tmp_path: Path) -> None:
    """A Parquet file written with a key offers it back on discover, with
    its columns' SQL types and nullability."""
    from setu_engine.kinds import WriteMode
    from setu_engine.values.types import Column

    columns = [
        Column("id", "integer", nullable=False),
        Column("name", "text", nullable=False, sql_type="character varying(20)"),
        Column("amount", "numeric", sql_type="numeric(5,2)"),
    ]

    async def batches() -> Any:
        yield [(1, "a", Decimal("1.25"))]

    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "parquet"})
    try:
        await connector.write("t", columns, batches(), WriteMode.OVERWRITE, ["id"])
        (stream,) = await connector.discover()
    finally:
        await connector.close()
    assert stream.primary_key == ("id",)
    assert list(stream.columns) == columns
