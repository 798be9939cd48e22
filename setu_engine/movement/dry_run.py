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

The real run checks the same things with the same code and words, so a
dry run fails exactly when, and because, the run would."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from setu_engine.errors import ConfigError, SpecError
from setu_engine.kinds import WriteMode
from setu_engine.movement import transfer
from setu_engine.operators.chain import PipelineSpec, SchemaEvolution
from setu_engine.planning import destination_plan
from setu_engine.planning.plans import PlannedColumn, PlannedStream, plans_from_json
from setu_engine.values.types import Stream, qualified

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


def handed_plan(value: Any) -> tuple[PlannedStream, ...]:
    """The plan a task was handed in its payload. A payload travels as a
    protobuf Struct, whose numbers are all floats: whole ones become ints
    again before the plan is read strictly."""
    return plans_from_json(_whole(value), PLAN_PAYLOAD)


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    return value
