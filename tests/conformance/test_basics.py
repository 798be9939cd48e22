"""test, discover and preview: test() describes what it reached; a written
stream is discovered with its columns as written (types, nullability and
key where the provider keeps them) and none of Setu's own tables; preview
honours its limit; a bad config is a ConfigError naming the field."""

from __future__ import annotations

import pytest

from setu_engine.errors import ConfigError
from setu_engine.kinds import WriteMode
from setu_engine.providers import get_provider
from tests.conformance import edges
from tests.conformance.harness import Place
from tests.conformance.support import PEOPLE, discovered, marker, write

ROWS = [(i, f"name {i}") for i in range(1, 8)]


async def test_test_answers_a_description(place: Place) -> None:
    connector = await place.connect()
    try:
        description = await connector.test()
    finally:
        await connector.close()
    assert isinstance(description, str) and description.strip()


async def test_a_written_stream_is_discovered_as_written(place: Place) -> None:
    rows, _ = edges.table(place.values)
    await write(place, "edge", edges.COLUMNS, rows[:3], WriteMode.OVERWRITE)
    await write(place, "people", PEOPLE, ROWS, WriteMode.APPEND, marker=marker("people"))
    connector = await place.connect()
    try:
        streams = await connector.discover()
    finally:
        await connector.close()
    assert sorted(s.name for s in streams) == ["edge", "people"], "Setu's own tables not offered"
    (edge,) = [s for s in streams if s.name == "edge"]
    assert [(c.name, c.type) for c in edge.columns] == [(c.name, c.type) for c in edges.COLUMNS]
    if place.capabilities.enforces_keys:
        assert tuple(edge.primary_key) == ("id",)
        assert not edge.columns[0].nullable


async def test_preview_honours_its_limit(place: Place) -> None:
    await write(place, "people", PEOPLE, ROWS, WriteMode.OVERWRITE)
    stream = await discovered(place, "people")
    connector = await place.connect()
    try:
        three = await connector.preview(stream, 3)
        everything = await connector.preview(stream, 100)
        none = await connector.preview(stream, 0)
    finally:
        await connector.close()
    assert len(three) == 3 and set(three) <= set(ROWS)
    assert sorted(everything) == ROWS
    assert none == []


async def test_an_unknown_config_field_is_a_config_error_naming_it(place: Place) -> None:
    provider = get_provider(place.harness.provider)
    stored = place.stored or place.config
    provider.validate_config(stored)
    with pytest.raises(ConfigError, match="no_such_field"):
        provider.validate_config({**stored, "no_such_field": 1})
