"""A dry run's plan (setu_engine/movement/dry_run.py makes it): per stream, where it
would land and how, and its JSON, the form it is recorded in and handed on
in a task's payload. Task results carry plans (setu_tasks/results.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from setu_engine.values.strict_json import MalformedResult, columns, fields, strings
from setu_engine.values.types import Column


@dataclass(frozen=True)
class PlannedColumn:
    """One column of a planned stream after the operator chain."""

    column: str
    type: str
    # The source column it carries ("" where an operator computed it).
    source: str = ""
    # The existing destination column's type ("" where the load creates it).
    destination_type: str = ""


@dataclass(frozen=True)
class PlannedStream:
    """A dry run's plan for one stream: where it would land, and how
    (setu_engine/movement/dry_run.py). `actions` stay empty until the destination was
    inspected; any `incompatibilities` fail the dry run."""

    stream: str
    destination: str
    rows_estimate: int
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    schema: str = ""
    table: str = ""
    actions: tuple[str, ...] = ()
    incompatibilities: tuple[str, ...] = ()
    mapping: tuple[PlannedColumn, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "destination": self.destination,
            "rows_estimate": self.rows_estimate,
            "columns": [c.to_dict() for c in self.columns],
            "key": list(self.key),
            "schema": self.schema,
            "table": self.table,
            "actions": list(self.actions),
            "incompatibilities": list(self.incompatibilities),
            "mapping": [
                {
                    "column": m.column,
                    "type": m.type,
                    "source": m.source,
                    "destination_type": m.destination_type,
                }
                for m in self.mapping
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> PlannedStream:
        # The fields a plan gained with destination inspection are optional,
        # so plans recorded before them still read.
        optional = dict(schema=str, table=str, actions=list, incompatibilities=list, mapping=list)
        p = fields(
            data,
            "planned stream",
            optional,
            stream=str,
            destination=str,
            rows_estimate=int,
            columns=list,
            key=list,
        )
        mapping = []
        for item in p.get("mapping", []):
            m = fields(
                item, "planned column", column=str, type=str, source=str, destination_type=str
            )
            mapping.append(
                PlannedColumn(m["column"], m["type"], m["source"], m["destination_type"])
            )
        return cls(
            p["stream"],
            p["destination"],
            p["rows_estimate"],
            columns(p["columns"]),
            strings(p["key"], "key"),
            p.get("schema", ""),
            p.get("table", ""),
            strings(p.get("actions", []), "actions"),
            strings(p.get("incompatibilities", []), "incompatibilities"),
            tuple(mapping),
        )


def plans_from_json(values: Any, what: str) -> tuple[PlannedStream, ...]:
    if not isinstance(values, list):
        raise MalformedResult(f"{what}: expected a list of planned streams")
    return tuple(PlannedStream.from_json(item) for item in values)


def incompatibilities(planned: tuple[PlannedStream, ...]) -> tuple[str, ...]:
    """Every reason, over all streams, the real run would fail."""
    return tuple(problem for p in planned for problem in p.incompatibilities)
