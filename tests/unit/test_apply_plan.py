"""The plan of `setu apply`: files read into declarations, compared with the
workspace, without a server."""

from __future__ import annotations

from typing import Any

import pytest

from setu_cli.apply import Agents, Current, exported, parse, plan, with_agents
from setu_cli.session import CliError

CRM_ID = "3f2b1c6e-0000-4000-8000-000000000001"
WAREHOUSE_ID = "3f2b1c6e-0000-4000-8000-000000000002"

# The README's two example files: a list of connections, and one pipeline.
CONNECTIONS: list[dict[str, Any]] = [
    {"name": "crm", "provider": "sqlite", "config": {"path": "crm.db"}},
    {"name": "warehouse", "provider": "sqlite", "config": {"path": "dw.db", "create": True}},
]
PIPELINE: dict[str, Any] = {
    "name": "crm-to-warehouse",
    "source": "crm",
    "destination": "warehouse",
    "streams": ["customers"],
    "write_mode": "append",
    "spec": {"operators": [{"op": "drop", "columns": ["note"]}]},
}


def workspace(**pipeline_changes: Any) -> list[Current]:
    """The workspace as applying CONNECTIONS and PIPELINE leaves it."""
    pipeline = {k: v for k, v in PIPELINE.items() if k != "name"}
    pipeline |= {"schedule": "", "paused": False} | pipeline_changes
    base = {"placement": "cloud", "agent": ""}
    return [
        Current(
            "connection", "crm", CRM_ID, base | {"provider": "sqlite", "config": {"path": "crm.db"}}
        ),
        Current(
            "connection",
            "warehouse",
            WAREHOUSE_ID,
            base | {"provider": "sqlite", "config": {"path": "dw.db", "create": True}},
        ),
        Current("pipeline", "crm-to-warehouse", "p-1", pipeline),
    ]


def lines(declared_docs: list[dict[str, Any]], current: list[Current]) -> list[str]:
    return [c.line() for c in plan(parse("setu.yaml", declared_docs), current)]


def test_an_empty_workspace_gets_everything_created_connections_first() -> None:
    document = {"pipelines": [PIPELINE], "connections": CONNECTIONS}
    assert lines([document], []) == [
        "+ connection crm",
        "+ connection warehouse",
        "+ pipeline crm-to-warehouse",
    ]
    # The README's shapes read the same: a list of connections, one pipeline.
    assert lines([*CONNECTIONS, PIPELINE], []) == lines([document], [])


def test_what_matches_the_workspace_is_unchanged() -> None:
    assert lines([*CONNECTIONS, PIPELINE], workspace()) == [
        "= connection crm (unchanged)",
        "= connection warehouse (unchanged)",
        "= pipeline crm-to-warehouse (unchanged)",
    ]


def test_a_pipeline_may_name_an_existing_connection_by_id() -> None:
    by_id = PIPELINE | {"source": CRM_ID}
    assert lines([by_id], workspace()) == ["= pipeline crm-to-warehouse (unchanged)"]


def test_changes_are_shown_field_by_field() -> None:
    changed = PIPELINE | {
        "write_mode": "upsert",
        "spec": {"operators": [], "primary_key": {"customers": ["id"]}},
    }
    crm = CONNECTIONS[0] | {"config": {"path": "crm2.db"}}
    assert lines([crm, changed], workspace()) == [
        "~ connection crm: config.path: crm.db → crm2.db",
        '~ pipeline crm-to-warehouse: spec.operators: [{"columns": ["note"], "op": "drop"}] → []; '
        'spec.primary_key: (none) → {"customers": ["id"]}; write_mode: append → upsert',
    ]


def test_a_field_left_out_returns_to_its_default() -> None:
    assert lines([PIPELINE], workspace(schedule="0 * * * *")) == [
        '~ pipeline crm-to-warehouse: schedule: "0 * * * *" → ""'
    ]


def test_the_workspace_exported_plans_no_change() -> None:
    current = workspace(write_mode="merge", paused=True)
    assert {c.line()[0] for c in plan(parse("x.yaml", [exported(current)]), current)} == {"="}
    assert exported(current)["connections"][0] == {
        "name": "crm",
        "provider": "sqlite",
        "config": {"path": "crm.db"},
    }


@pytest.mark.parametrize(
    ("documents", "message"),
    [
        (
            [{"connections": CONNECTIONS, "pipeline": [PIPELINE]}],
            "setu.yaml: document 1: unknown key(s) pipeline",
        ),
        (
            [CONNECTIONS[0] | {"hosts": "x"}],
            "setu.yaml: connection crm: unknown key(s) hosts",
        ),
        (
            [PIPELINE | {"write_mode": "upset"}],
            "setu.yaml: pipeline crm-to-warehouse: write_mode must be one of",
        ),
        (
            [*CONNECTIONS, PIPELINE | {"destination": "warehous"}],
            "setu.yaml: pipeline crm-to-warehouse: destination 'warehous' is no connection",
        ),
        ([{"name": "x"}], "setu.yaml: entry 1 is neither a connection"),
    ],
)
def test_a_bad_entry_fails_naming_the_file_and_the_entry(
    documents: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(CliError) as failed:
        plan(parse("setu.yaml", documents), [])
    assert str(failed.value).startswith(message)


EDGE, OTHER = "4f154cbd-0000-4000-8000-000000000001", "4f154cbd-0000-4000-8000-000000000002"


def test_an_agent_is_named_by_name_or_id_and_shown_by_name() -> None:
    agents = Agents({EDGE: "edge-1", OTHER: "edge-2"})
    file = [
        {"name": "a", "provider": "sqlite", "placement": "agent", "agent": "edge-1"},
        {"name": "b", "provider": "sqlite", "placement": "agent", "agent_id": "edge-2"},
        {"name": "c", "provider": "sqlite", "placement": "agent", "agent": EDGE.upper()},
    ]
    resolved = with_agents(parse("x.yaml", file), agents)
    assert [d.fields["agent"] for d in resolved] == ["edge-1", "edge-2", "edge-1"]
    assert [agents.id_of(d.fields["agent"]) for d in resolved] == [EDGE, OTHER, EDGE]


def test_an_unknown_or_shared_agent_name_is_an_error_naming_the_candidates() -> None:
    file = [{"name": "a", "provider": "sqlite", "placement": "agent", "agent": "edge"}]
    with pytest.raises(CliError, match=r"agent 'edge' is no agent .*its agents: edge-1, edge-2"):
        with_agents(parse("x.yaml", file), Agents({EDGE: "edge-1", OTHER: "edge-2"}))
    # Names are unique in a workspace today; should two agents share one,
    # the name is refused and the ids are offered, and both show by id.
    twins = Agents({EDGE: "edge", OTHER: "edge"})
    with pytest.raises(CliError, match=f"agent 'edge' is ambiguous.*{EDGE}, {OTHER}"):
        with_agents(parse("x.yaml", file), twins)
    assert twins.shown(EDGE) == EDGE
    with pytest.raises(CliError, match="agent_id and agent name the same thing"):
        parse("x.yaml", [file[0] | {"agent_id": EDGE}])


def test_a_name_taken_again_means_the_active_agent_and_the_old_one_reads_by_id() -> None:
    # EDGE was deactivated and its replacement registered as edge-1 again.
    agents = Agents({EDGE: "edge-1", OTHER: "edge-1"}, inactive=frozenset({EDGE}))
    file = [{"name": "a", "provider": "sqlite", "placement": "agent", "agent": "edge-1"}]
    (resolved,) = with_agents(parse("x.yaml", file), agents)
    assert agents.id_of(resolved.fields["agent"]) == OTHER
    assert (agents.shown(OTHER), agents.shown(EDGE)) == ("edge-1", EDGE)
    # Two deactivated agents of one name, and no active one: the ids, as ever.
    with pytest.raises(CliError, match="agent 'edge-1' is ambiguous"):
        with_agents(parse("x.yaml", file), Agents(agents.names, frozenset({EDGE, OTHER})))
