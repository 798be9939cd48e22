"""Prometheus metrics of one server process.

`exposition()` renders the registry in the text format `/metrics` serves."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)


def exposition() -> tuple[bytes, str]:
    """The registry's current figures and their content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
