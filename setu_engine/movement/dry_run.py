"""A dry run's plan, in two halves that may run in two places:

- `plan` (pure): from the pipeline's spec and what the source offers, per
  stream, where it would land, its columns after the operator chain (and
  where each comes from), its key, and what already stops it (an unknown
  column in the chain, a cast that cannot be made, a key the write mode
  needs and the stream lacks). Runs wherever the source's streams are known.
- `inspect_destination`: where the load would run (the cloud, or the
  destination's agent, whose secrets only it holds), each planned stream is
  compared with the destination (setu_engine/planning/destination_plan.py): the actions
  (create schema, create table, add columns, write into the existing
  table) and what would stop the load there. Nothing is written.
- `sample`: where the source is open (the cloud, or the source's agent),
  the first rows of each stream (SampleLimits: at most 1,000 rows, 8 MiB
  and 10 s by default) go through the same compiled chain the real run
  applies (its filters, renames, casts and the declared column types of
  spec.columns), and the first value that would not fit is reported as
  the run would fail on it. A clean sample says how many rows it checked:
  it is no promise for the rows after them.

The real run checks the same things with the same code and words, so a
dry run fails exactly when, and because, the run would."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from setu_engine.errors import ConfigError, PermanentError, SpecError, ValueFault, excerpt
from setu_engine.kinds import WriteMode
from setu_engine.movement import transfer
from setu_engine.operators.chain import PipelineSpec, Plan, SchemaEvolution
from setu_engine.planning import destination_plan
from setu_engine.planning.plans import (
    PlannedColumn,
    PlannedStream,
    SampleCheck,
    SampleFault,
    plans_from_json,
)
from setu_engine.providers.base import Connector
from setu_engine.support.closing import closing
from setu_engine.values.types import Row, Stream, qualified

# The task payload key of what a source agent's discover samples for a dry
# run (the pipeline's spec, streams and write mode; SamplePayload).
SAMPLE_PAYLOAD = "dry_run_sample"

# A sample's bounds by default: rows (a named setting of the runtimes,
# SETU_DRY_RUN_SAMPLE_ROWS), bytes of values held, seconds of reading.
SAMPLE_ROWS = 1_000
SAMPLE_BYTES = 8 * 1024 * 1024
SAMPLE_SECONDS = 10.0
# The longest error text a sample reports (the value in it is an excerpt).
ERROR_CHARS = 1_000


@dataclass(frozen=True)
class SampleLimits:
    rows: int = SAMPLE_ROWS
    bytes: int = SAMPLE_BYTES
    seconds: float = SAMPLE_SECONDS


DEFAULT_SAMPLE = SampleLimits()


# The task payload key of a plan handed on to where the load would run (the
# destination's agent, or the cloud after a source agent planned).
PLAN_PAYLOAD = "dry_run_plan"


def plan(
    spec: PipelineSpec, streams: Sequence[Stream], mode: WriteMode
) -> tuple[PlannedStream, ...]:
    return tuple(plan_one(spec, stream, mode) for stream in streams)


def plan_one(spec: PipelineSpec, stream: Stream, mode: WriteMode) -> PlannedStream:
    name = qualified(stream)
    schema, table = transfer.landing_name(spec, stream)
    where = f"{schema}.{table}" if schema else table
    try:
        landing = transfer.plan_stream(spec, stream, mode)
    except SpecError as exc:
        return _unplanned(stream, name, where, schema, table, f"stream {name}: {exc}")
    except ConfigError as exc:  # its message names the stream
        return _unplanned(stream, name, where, schema, table, str(exc))
    output = landing.plan.output
    mapping = tuple(
        PlannedColumn(c.name, c.sql_type or c.type, source or "")
        for c, source in zip(output, landing.plan.sources(), strict=True)
    )
    return PlannedStream(
        stream=name,
        destination=landing.destination,
        rows_estimate=stream.row_estimate,
        columns=tuple(output),
        key=tuple(landing.key),
        schema=landing.schema or "",
        table=landing.table,
        mapping=mapping,
    )


def _unplanned(
    stream: Stream, name: str, where: str, schema: str | None, table: str, problem: str
) -> PlannedStream:
    return PlannedStream(
        stream=name,
        destination=where,
        rows_estimate=stream.row_estimate,
        columns=(),
        key=(),
        schema=schema or "",
        table=table,
        incompatibilities=(problem,),
    )


async def inspect_destination(
    destination: object,
    planned: Sequence[PlannedStream],
    mode: WriteMode,
    evolution: SchemaEvolution,
) -> tuple[PlannedStream, ...]:
    """The plan with what the destination says of each stream."""
    return tuple([await _inspect_one(destination, p, mode, evolution) for p in planned])


async def _inspect_one(
    destination: object, p: PlannedStream, mode: WriteMode, evolution: SchemaEvolution
) -> PlannedStream:
    if not p.columns and p.incompatibilities:
        return p  # the chain does not fit the source: nothing to compare
    landing = destination_plan.Landing(p.stream, p.table, p.schema or None, p.columns, p.key)
    seen = await destination_plan.inspect(destination, landing, mode, evolution)
    mapping = tuple(
        replace(m, destination_type=seen.destination_types.get(m.column, "")) for m in p.mapping
    )
    return replace(
        p,
        actions=seen.actions,
        incompatibilities=p.incompatibilities + seen.incompatibilities,
        mapping=mapping,
    )


async def sample(
    source: Connector,
    spec: PipelineSpec,
    streams: Sequence[Stream],
    mode: WriteMode,
    limits: SampleLimits,
) -> dict[str, SampleCheck]:
    """Per stream (by qualified name), what its first rows meet in the
    chain; a stream the chain does not fit is left out (its plan says why).
    A limit of 0 rows reads no sample at all."""
    checks: dict[str, SampleCheck] = {}
    for stream in streams if limits.rows > 0 else ():
        try:
            landing = transfer.plan_stream(spec, stream, mode)
        except (SpecError, ConfigError):
            continue
        checks[qualified(stream)] = await sample_one(source, stream, landing.plan, limits)
    return checks


async def sample_one(
    source: Connector, stream: Stream, plan: Plan, limits: SampleLimits
) -> SampleCheck:
    """The stream's first rows, as the run reads them, through `plan` (a
    fresh one: it counts the rows it applied, for a fault's row number)."""
    rows: list[Row] = []
    held = 0
    cut = ""
    fault: SampleFault | None = None
    name = qualified(stream)
    try:
        async with asyncio.timeout(limits.seconds):
            async with closing(source.read(stream, limits.rows)) as batches:
                async for batch in batches:
                    for row in batch[: limits.rows - len(rows)]:
                        rows.append(row)
                        held += _size(row)
                        if held >= limits.bytes:
                            cut = "bytes"
                            break
                    if cut or len(rows) >= limits.rows:
                        break
    except TimeoutError:
        cut = "time"
    except ValueFault as exc:  # a value the source itself cannot read
        fault = _fault(exc.located(name, len(rows)), plan)
    if fault is None:
        try:
            plan.apply(rows)
        except ValueFault as exc:
            fault = _fault(exc.located(name), plan)
        except PermanentError as exc:
            fault = SampleFault("", 0, "", "", _short(f"stream {name!r}: {exc}"))
    if cut == "bytes" and len(rows) >= limits.rows:
        cut = ""
    return SampleCheck(len(rows), limits.rows, cut, fault)


def _fault(fault: ValueFault, plan: Plan) -> SampleFault:
    declared = next((c for c in plan.output if c.name == fault.column), None)
    return SampleFault(
        column=fault.column or "",
        row=fault.row or 0,
        value=excerpt(fault.value),
        declared_type="" if declared is None else declared.sql_type or declared.type,
        error=_short(str(fault)),
    )


def _short(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def _size(row: Row) -> int:
    """About the bytes a row's values hold: the sample's byte bound."""
    return sum(len(v) if isinstance(v, str | bytes) else 8 for v in row)


def with_samples(
    planned: Sequence[PlannedStream], checks: Mapping[str, SampleCheck]
) -> tuple[PlannedStream, ...]:
    """The plan with each stream's sample; a fault in one is a reason the
    run would fail, in the run's own words."""
    out = []
    for p in planned:
        check = checks.get(p.stream)
        if check is None:
            out.append(p)
            continue
        problems = p.incompatibilities
        if check.fault is not None:
            seen = f"met in a sample of the stream's first {check.rows:,} rows"
            problems += (f"{check.fault.error}; {seen}",)
        out.append(replace(p, sample=check, incompatibilities=problems))
    return tuple(out)


def handed_plan(value: Any) -> tuple[PlannedStream, ...]:
    """The plan a task was handed in its payload. A payload travels as a
    protobuf Struct, whose numbers are all floats: whole ones become ints
    again before the plan is read strictly."""
    return plans_from_json(_whole(value), PLAN_PAYLOAD)


def sample_payload(spec: Mapping[str, Any], streams: Sequence[str], mode: WriteMode) -> Any:
    """What a source agent's discover is handed to sample for a dry run."""
    return {"spec": dict(spec), "streams": list(streams), "write_mode": mode.value}


def handed(value: Any) -> dict[str, Any]:
    """A payload's value as it was put in (whole numbers as ints)."""
    whole = _whole(value)
    if not isinstance(whole, dict):
        raise TypeError("expected an object")
    return whole


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    return value
