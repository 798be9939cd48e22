"""Providers by name. Modules load on first use, so a runtime pays only for
the drivers it runs."""

from __future__ import annotations

import importlib
from typing import Any

from setu_engine.errors import ConfigError
from setu_engine.providers.base import Provider

_MODULES: dict[str, str] = {
    "postgres": "setu_engine.providers.postgres",
    "sqlite": "setu_engine.providers.sqlite",
    "file": "setu_engine.providers.files",
    "mysql": "setu_engine.providers.mysql",
    "duckdb": "setu_engine.providers.duckdb",
}

NAMES: tuple[str, ...] = tuple(_MODULES)


def get_provider(name: str) -> Provider:
    """The provider called name; raises ConfigError for an unknown one.
    Each provider module exposes its instance as `PROVIDER`."""
    module = _MODULES.get(name)
    if module is None:
        raise ConfigError(f"unknown provider {name!r}; use one of {', '.join(NAMES)}")
    provider: Provider = importlib.import_module(module).PROVIDER
    return provider


def validate_config(provider: str, config: dict[str, Any]) -> None:
    """Raises ConfigError when the provider is unknown or its config is wrong."""
    get_provider(provider).validate_config(config)
