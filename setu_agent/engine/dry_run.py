"""A dry run's plan: where each stream would land, and how, computed from
the pipeline's spec and what the source offers. Pure: the cloud's migrate
and the server (for a dry run whose source is on an agent) plan alike."""

from __future__ import annotations

from collections.abc import Sequence

from setu_agent.engine import transfer
from setu_agent.engine.operators import PipelineSpec
from setu_agent.engine.providers.base import WriteMode
from setu_agent.engine.types import Stream
from setu_agent.results import PlannedStream


def plan(
    spec: PipelineSpec, streams: Sequence[Stream], mode: WriteMode
) -> tuple[PlannedStream, ...]:
    planned = []
    for stream in streams:
        landing = transfer.plan_stream(spec, stream, mode)
        planned.append(
            PlannedStream(
                stream=stream.name,
                destination=landing.destination,
                rows_estimate=stream.row_estimate,
                columns=tuple(landing.plan.output),
                key=tuple(landing.key),
            )
        )
    return tuple(planned)
