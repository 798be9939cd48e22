"""Errors classified where they are raised: a duplicate key under append
(where the provider keeps keys, capabilities.enforces_keys) is a
PermanentError with the same fix for every provider, the target unchanged;
without keys the repeat is written as it comes; a config missing what it
must have is a ConfigError; a lock another session holds, waited out, is a
TransientError (where the harness can provoke one for real)."""

from __future__ import annotations

import pytest

from setu_engine.errors import ConfigError, PermanentError, TransientError
from setu_engine.kinds import WriteMode
from setu_engine.providers import get_provider
from setu_engine.providers.failures import DUPLICATE_KEY
from tests.conformance.harness import Place
from tests.conformance.support import PEOPLE, read_back, write

BEFORE = [(1, "a"), (2, "b")]


async def test_a_duplicate_key_under_append(place: Place) -> None:
    await write(place, "people", PEOPLE, BEFORE, WriteMode.OVERWRITE)
    repeat = [(3, "c"), (2, "again")]
    if not place.capabilities.enforces_keys:
        assert int(await write(place, "people", PEOPLE, repeat, WriteMode.APPEND)) == 2
        assert sorted(await read_back(place, "people")) == sorted([*BEFORE, *repeat])
        return
    with pytest.raises(PermanentError) as caught:
        await write(place, "people", PEOPLE, repeat, WriteMode.APPEND)
    assert DUPLICATE_KEY in str(caught.value), "the same fix as every provider's"
    assert await read_back(place, "people") == BEFORE


async def test_a_config_without_its_required_field_is_a_config_error(place: Place) -> None:
    provider = get_provider(place.harness.provider)
    stored = place.stored or place.config
    required = {"postgres": "database", "mysql": "database", "file": "url"}.get(
        provider.name, "path"
    )
    broken = {k: v for k, v in stored.items() if k != required}
    with pytest.raises(ConfigError, match=required):
        provider.validate_config(broken)


async def test_a_lock_wait_is_transient(place: Place) -> None:
    if place.harness.hold is None:
        pytest.skip("no lock to wait on: the provider has no transient failure to provoke")
    await write(place, "people", PEOPLE, BEFORE, WriteMode.OVERWRITE)
    async with place.harness.hold(place, "people"):
        with pytest.raises(TransientError):
            await write(place, "people", PEOPLE, [(2, "B")], WriteMode.UPSERT)
    assert await read_back(place, "people") == BEFORE
