"""A log call's `extra` names no field the LogRecord has already: logging
raises KeyError for those ("Attempt to overwrite 'process' in LogRecord"),
so the call that meant to say something fails instead, wherever it runs."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

from tests.servers import ROOT

PACKAGES = ("setu_agent", "setu_cli", "setu_client", "setu_engine", "setu_server", "setu_tasks")
RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def _extra_keys(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                    found += [
                        (node.lineno, key.value)
                        for key in keyword.value.keys
                        if isinstance(key, ast.Constant) and isinstance(key.value, str)
                    ]
    return found


def test_no_log_call_names_a_field_the_log_record_owns() -> None:
    sources = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    assert len(sources) > 50
    clashes = [
        f"{path.relative_to(ROOT)}:{line} names {key!r}"
        for path in sources
        if "_pb2" not in path.name
        for line, key in _extra_keys(path)
        if key in RESERVED
    ]
    assert not clashes, clashes


def test_the_guard_knows_the_fields_logging_refuses() -> None:
    logger = logging.getLogger("setu.test")
    for key in ("process", "name", "message"):
        assert key in RESERVED
        try:
            logger.makeRecord("setu.test", logging.INFO, "f", 1, "m", (), None, extra={key: 1})
        except KeyError:
            continue
        raise AssertionError(f"logging accepted extra {key!r}")
