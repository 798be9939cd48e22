"""Reading recorded JSON strictly: an object has exactly the fields its shape
names (and any of its optional ones), each of its type, or the reader raises
MalformedResult (INVALID_ARGUMENT) naming what is wrong, so a misspelt key
fails loudly instead of vanishing. The task results (setu_tasks/results.py)
and a dry run's plan (setu_engine/planning/plans.py) are read with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from setu_client.errors import InvalidArgument
from setu_engine.errors import SqlTypeError
from setu_engine.values import sqltypes
from setu_engine.values.types import Column


class MalformedResult(InvalidArgument):
    """A result that does not have its kind's shape."""


def check(value: Any, kind: type, what: str) -> None:
    # bool is an int to Python, never a count to us.
    wrong = not isinstance(value, kind) or (kind is int and isinstance(value, bool))
    if wrong:
        raise MalformedResult(f"{what}: expected {kind.__name__}, got {type(value).__name__}")


def fields(
    data: Any, what: str, optional: Mapping[str, type] | None = None, **types: type
) -> dict[str, Any]:
    """`data` as an object with exactly these fields (and any of the
    `optional` ones), each of its type."""
    body = an_object(data, what)
    optional = optional or {}
    unknown = sorted(set(body) - set(types) - set(optional))
    missing = sorted(set(types) - set(body))
    if unknown or missing:
        problems = [f"unknown field(s) {', '.join(unknown)}"] if unknown else []
        problems += [f"missing field(s) {', '.join(missing)}"] if missing else []
        raise MalformedResult(f"{what}: {'; '.join(problems)}")
    for name, kind in types.items():
        check(body[name], kind, f"{what}.{name}")
    for name, kind in optional.items():
        if name in body:
            check(body[name], kind, f"{what}.{name}")
    return body


def an_object(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise MalformedResult(f"{what}: expected an object, got {type(data).__name__}")
    return dict(data)


def strings(values: list[Any], what: str) -> tuple[str, ...]:
    for value in values:
        check(value, str, what)
    return tuple(values)


def columns(values: list[Any]) -> tuple[Column, ...]:
    out = []
    for item in values:
        c = fields(item, "column", {"sql_type": str}, name=str, type=str, nullable=bool)
        try:
            sql_type = sqltypes.canonical(c.get("sql_type", ""))
        except SqlTypeError as exc:
            raise MalformedResult(f"column {c['name']}: {exc}") from None
        out.append(Column(c["name"], c["type"], c["nullable"], sql_type))
    return tuple(out)
