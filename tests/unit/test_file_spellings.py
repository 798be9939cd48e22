"""The file provider's spellings (docs/data-types.md, "Values and spellings
per format"): what the JSON Lines and CSV writers print for the values
without an obvious spelling, and that Setu's own reader takes each back."""

from __future__ import annotations

import csv
import json
import math
import struct
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest

from setu_engine.errors import ValueFault
from setu_engine.providers.files.codec import MISSING, from_json, from_text, infer_json
from setu_engine.providers.files.encode import csv_encoder, jsonl_encoder
from setu_engine.values.special import INFINITY, JSON_NULL, MINUS_INFINITY
from setu_engine.values.types import Column


def float4(value: float) -> float:
    return float(struct.unpack("!f", struct.pack("!f", value))[0])


# (type, neutral value, JSON Lines spelling, CSV spelling)
SPELLINGS: list[tuple[str, Any, str, str]] = [
    ("double", math.nan, '"NaN"', "NaN"),
    ("double", math.inf, '"Infinity"', "Infinity"),
    ("double", -math.inf, '"-Infinity"', "-Infinity"),
    ("double", -0.0, "-0.0", "-0.0"),
    ("real", math.nan, '"NaN"', "NaN"),
    ("real", -math.inf, '"-Infinity"', "-Infinity"),
    ("real", float4(0.01), "0.01", "0.01"),
    ("real", float4(1e-45), "1e-45", "1e-45"),
    ("numeric", Decimal("NaN"), '"NaN"', "NaN"),
    ("numeric", Decimal("Infinity"), '"Infinity"', "Infinity"),
    ("numeric", Decimal("-Infinity"), '"-Infinity"', "-Infinity"),
    ("numeric", Decimal("1.10"), "1.10", "1.10"),
    ("date", INFINITY, '"infinity"', "infinity"),
    ("timestamp", MINUS_INFINITY, '"-infinity"', "-infinity"),
    ("timestamptz", INFINITY, '"infinity"', "infinity"),
    (
        "timestamptz",
        datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        '"2024-01-02T03:04:05.000006+00:00"',
        "2024-01-02T03:04:05.000006+00:00",
    ),
    ("bytes", b"\x00\xff", '"AP8="', "AP8="),
    ("json", JSON_NULL, "null", "null"),
    ("json", {"a": None}, '{"a":null}', '"{""a"":null}"'),
]


def same(type_: str, a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if type_ == "real":
            a, b = float4(a), float4(b)
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return str(a) == str(b)
    return a is b if a is JSON_NULL or b is JSON_NULL else bool(a == b)


@pytest.mark.parametrize(("type_", "value", "spelled", "_"), SPELLINGS)
def test_json_lines_spelling_reads_back(type_: str, value: Any, spelled: str, _: str) -> None:
    line = jsonl_encoder([Column("v", type_)])([(value,)])
    assert line == b'{"v":' + spelled.encode() + b"}\n"
    decoded = json.loads(line, parse_float=Decimal)["v"]
    assert same(type_, from_json(decoded, type_), value)


@pytest.mark.parametrize(("type_", "value", "_", "spelled"), SPELLINGS)
def test_csv_spelling_reads_back(type_: str, value: Any, _: str, spelled: str) -> None:
    line = csv_encoder([Column("v", type_)], ",")([(value,)])
    assert line == spelled.encode() + b"\n"
    text = next(csv.reader([line.decode().rstrip("\n")]))[0]
    assert same(type_, from_text(text, type_), value)


def test_a_json_columns_sql_null_leaves_its_key_out() -> None:
    columns = [Column("id", "bigint"), Column("doc", "json"), Column("n", "text")]
    out = jsonl_encoder(columns)([(1, None, None), (2, JSON_NULL, "x")])
    assert out == b'{"id":1,"n":null}\n{"id":2,"doc":null,"n":"x"}\n'
    assert from_json(MISSING, "json") is None
    assert from_json(None, "json") is JSON_NULL
    assert from_json(None, "text") is None


def test_sql_null_is_an_empty_csv_field_and_json_null_is_null() -> None:
    out = csv_encoder([Column("doc", "json"), Column("d", "date")], ",")(
        [(None, None), (JSON_NULL, date(2024, 1, 1))]
    )
    assert out == b",\nnull,2024-01-01\n"


def test_a_column_of_numbers_and_their_non_finite_spellings_is_inferred_a_number() -> None:
    assert infer_json([Decimal("1.5"), "NaN", "Infinity", "-Infinity"]) == "double"


def test_a_value_with_no_json_form_names_its_column_and_row() -> None:
    encode = jsonl_encoder([Column("id", "bigint"), Column("doc", "json")])
    with pytest.raises(ValueFault, match=r"column 'doc', row 2: no JSON form") as caught:
        encode([(1, {"a": 1}), (2, {"big": 2**70})])
    assert caught.value.retryable is False
