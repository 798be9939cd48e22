"""A dry run's plan (setu_engine/movement/dry_run.py makes it): per stream, where it
would land and how, what a sample of its rows met, and its JSON, the form it
is recorded in and handed on in a task's payload. Task results carry plans
(setu_tasks/results.py)."""

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
class SampleFault:
    """The first sampled value the real run would fail on."""

    # The column it sits in ("" where the fault names none, e.g. a filter).
    column: str
    # Its row, 1-based, in the order the run reads the stream.
    row: int
    # A short excerpt of the value, never the whole of it.
    value: str
    # The type the column was to take there ("" where none was declared).
    declared_type: str
    # The error the real run fails with, in its words.
    error: str

    def to_json(self) -> dict[str, Any]:
        return {
            "column": self.column,
            "row": self.row,
            "value": self.value,
            "declared_type": self.declared_type,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Any) -> SampleFault:
        f = fields(
            data, "sample fault", column=str, row=int, value=str, declared_type=str, error=str
        )
        return cls(f["column"], f["row"], f["value"], f["declared_type"], f["error"])


@dataclass(frozen=True)
class SampleCheck:
    """What a dry run checked of one stream's rows: the first `rows` of it
    (at most `limit`), through the operator chain and the declared column
    types. A clean sample is no guarantee for the rows after it."""

    rows: int
    limit: int
    # Why the sample stopped short of `limit` rows: "bytes" or "time" where
    # a bound cut it; "" where the stream ended or the limit was reached.
    cut: str = ""
    fault: SampleFault | None = None

    def said(self, stream: str) -> str:
        """In a person's words: what was checked, and what it met."""
        head = f"checked the first {self.rows:,} rows of {stream}"
        if self.cut:
            head += f" (the sample's {self.cut} bound stopped it)"
        elif self.rows < self.limit:
            head += " (the stream had no more)"
        if self.fault is None:
            return f"{head}: every value fits"
        return f"{head}: row {self.fault.row} would fail the run"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rows": self.rows, "limit": self.limit, "cut": self.cut}
        if self.fault is not None:
            out["fault"] = self.fault.to_json()
        return out

    @classmethod
    def from_json(cls, data: Any) -> SampleCheck:
        s = fields(data, "sample", {"fault": dict}, rows=int, limit=int, cut=str)
        fault = SampleFault.from_json(s["fault"]) if "fault" in s else None
        return cls(s["rows"], s["limit"], s["cut"], fault)


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
    # What a sample of the stream's rows met; None where none was read (the
    # chain does not fit the stream, or a plan made before sampling).
    sample: SampleCheck | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
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
        if self.sample is not None:
            out["sample"] = self.sample.to_json()
        return out

    @classmethod
    def from_json(cls, data: Any) -> PlannedStream:
        # The fields a plan gained with destination inspection are optional,
        # so plans recorded before them still read.
        optional = dict(
            schema=str, table=str, actions=list, incompatibilities=list, mapping=list, sample=dict
        )
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
            SampleCheck.from_json(p["sample"]) if "sample" in p else None,
        )


def plans_from_json(values: Any, what: str) -> tuple[PlannedStream, ...]:
    if not isinstance(values, list):
        raise MalformedResult(f"{what}: expected a list of planned streams")
    return tuple(PlannedStream.from_json(item) for item in values)


def incompatibilities(planned: tuple[PlannedStream, ...]) -> tuple[str, ...]:
    """Every reason, over all streams, the real run would fail."""
    return tuple(problem for p in planned for problem in p.incompatibilities)
