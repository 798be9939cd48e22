"""The dispatch table: task kind -> handler. The data-flow work fills it
(`test`, `discover`, `preview`, `extract`, `load`); a kind missing here is
failed by the runtime with a clear, non-retryable error."""

from __future__ import annotations

import importlib

from setu_agent.runtime import Handler

HANDLERS: dict[str, Handler] = {}


def load_extra(spec: str) -> dict[str, Handler]:
    """Handlers from `package.module:NAME` (a dict of kind -> handler), for
    extensions and tests."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"--extra-handlers wants MODULE:NAME, got {spec!r}")
    table = getattr(importlib.import_module(module_name), attribute)
    if not isinstance(table, dict):
        raise SystemExit(f"{spec} is not a dict of task kind -> handler")
    return dict(table)
