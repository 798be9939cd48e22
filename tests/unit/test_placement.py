"""placement(source, destination): the four rows of docs/flows.md."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import pytest

from setu_server.models import Placement, RunSnapshot, TaskKind, WriteMode
from setu_server.service.placement import placement

A = uuid.UUID("00000000-0000-0000-0000-00000000000a")
B = uuid.UUID("00000000-0000-0000-0000-00000000000b")


@dataclass(frozen=True)
class End:
    placement: Placement
    agent_id: uuid.UUID | None = None


CLOUD = End(Placement.CLOUD)


@pytest.mark.parametrize(
    ("source", "destination", "flow", "extract", "load", "first_task", "first_agent"),
    [
        (CLOUD, CLOUD, "cloud → cloud", "cloud", "cloud", TaskKind.MIGRATE, None),
        (End(Placement.AGENT, A), CLOUD, "agent → cloud", str(A), "cloud", TaskKind.EXTRACT, A),
        # The cloud stages first, but the first edge stage (checked online)
        # is the load on B.
        (CLOUD, End(Placement.AGENT, B), "cloud → agent", "cloud", str(B), TaskKind.MIGRATE, B),
        (
            End(Placement.AGENT, A),
            End(Placement.AGENT, B),
            "agent → agent",
            str(A),
            str(B),
            TaskKind.EXTRACT,
            A,
        ),
    ],
)
def test_each_flow_runs_its_stages_where_its_connections_are_placed(
    source: End,
    destination: End,
    flow: str,
    extract: str,
    load: str,
    first_task: TaskKind,
    first_agent: uuid.UUID | None,
) -> None:
    where = placement(source, destination)
    assert where.flow == flow
    assert (where.extract_runtime, where.load_runtime) == (extract, load)
    assert (where.first_task, where.first_agent) == (first_task, first_agent)
    assert where.cloud_touches_data == (flow != "agent → agent")


def test_an_agent_id_on_a_cloud_connection_does_not_pin_it() -> None:
    stray = End(Placement.CLOUD, A)
    assert placement(stray, stray).flow == "cloud → cloud"


def test_a_run_keeps_its_placement_in_its_snapshot() -> None:
    where = placement(End(Placement.AGENT, A), End(Placement.CLOUD))
    taken = RunSnapshot(
        pipeline_name="nightly",
        source_connection_id=A,
        destination_connection_id=B,
        streams=("public.items",),
        spec={"operators": []},
        write_mode=WriteMode.UPSERT,
        placement=where,
    )
    saved = json.loads(json.dumps(taken.to_json()))  # as the jsonb column keeps it
    assert saved["placement"] == {"extract": str(A), "load": "cloud", "flow": "agent → cloud"}
    assert RunSnapshot.from_json(saved) == taken
