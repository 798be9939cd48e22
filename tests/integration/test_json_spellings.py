"""The two JSON Lines writers (Python's, setu_engine/providers/files/encode.py,
and the SQL PostgreSQL runs, setu_engine/providers/postgres/json.py)
spell the special values from one source, setu_engine/values/spellings.py:
change a spelling there and both lines change alike, on real PostgreSQL."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import asyncpg
import pytest

from setu_engine.providers.files.encode import csv_encoder, jsonl_encoder
from setu_engine.providers.postgres.json import line_sql
from setu_engine.values import spellings
from setu_engine.values.special import INFINITY, MINUS_INFINITY
from setu_engine.values.types import Column

# (neutral type, SQL literal, the engine's value)
SPECIAL: list[tuple[str, str, Any]] = [
    ("double", "'NaN'::float8", math.nan),
    ("double", "'Infinity'::float8", math.inf),
    ("real", "'-Infinity'::float4", -math.inf),
    ("double", "'-0'::float8", -0.0),
    ("numeric", "'NaN'::numeric", Decimal("NaN")),
    ("numeric", "'-Infinity'::numeric", Decimal("-Infinity")),
    ("date", "'infinity'::date", INFINITY),
    ("timestamp", "'-infinity'::timestamp", MINUS_INFINITY),
    ("timestamptz", "'infinity'::timestamptz", INFINITY),
    ("double", "NULL::float8", None),
]

# Deliberately unlike PostgreSQL's words, so a writer that spells a value
# its own way (rather than from the module) shows.
ODD = {
    "NAN": "not-a-number",
    "INFINITY": "+inf",
    "MINUS_INFINITY": "-inf",
    "DATE_INFINITY": "forever",
    "DATE_MINUS_INFINITY": "since-ever",
}


async def _both(pool: asyncpg.Pool, type_: str, literal: str, value: Any) -> tuple[str, str]:
    columns = [Column("v", type_)]
    rendered = await pool.fetchval(line_sql(columns, f"SELECT {literal} AS v"))
    encoded = jsonl_encoder(columns)([(value,)]).decode().rstrip("\n")
    return rendered, encoded


@pytest.mark.parametrize(("type_", "literal", "value"), SPECIAL)
async def test_both_writers_spell_a_special_value_alike(
    pool: asyncpg.Pool, type_: str, literal: str, value: Any
) -> None:
    rendered, encoded = await _both(pool, type_, literal, value)
    assert rendered == encoded


@pytest.mark.parametrize(("type_", "literal", "value"), SPECIAL)
async def test_both_writers_read_their_spellings_from_one_module(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, type_: str, literal: str, value: Any
) -> None:
    for name, odd in ODD.items():
        monkeypatch.setattr(spellings, name, odd)
    rendered, encoded = await _both(pool, type_, literal, value)
    assert rendered == encoded
    if value is not None and not (isinstance(value, float) and value == 0):
        assert any(f'"{odd}"' in rendered for odd in ODD.values()), rendered


def test_csv_reads_the_same_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, odd in ODD.items():
        monkeypatch.setattr(spellings, name, odd)
    columns = [Column("d", "double"), Column("n", "numeric"), Column("t", "date")]
    line = csv_encoder(columns, ",")([(math.nan, Decimal("Infinity"), MINUS_INFINITY)])
    assert line == b"not-a-number,+inf,since-ever\n"
