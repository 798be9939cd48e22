"""Agents by name where a person reads them (setu_server/service/naming.py):
the labels, and the "agent:<id>" of the texts the server writes rendered
when read."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from uuid import UUID, uuid4

from setu_server.models import Agent, AgentName, Job, JobKind, JobState
from setu_server.service.naming import RuntimeNames, named_agents, runtime_agent

EDGE = UUID("4f154cbd-0000-4000-8000-000000000001")
TWIN = UUID("9a0c7e21-0000-4000-8000-000000000002")
GONE = UUID("77aa88bb-0000-4000-8000-000000000003")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _agent(id: UUID, name: str, active: bool = True) -> Agent:
    return Agent(id, uuid4(), name, active, "", [], "", None, NOW)


def test_an_agent_reads_by_its_name_and_the_cloud_as_cloud() -> None:
    names = RuntimeNames({EDGE: AgentName(EDGE, "edge-1")})
    assert names.label(f"agent:{EDGE}") == "agent edge-1"
    assert names.label(str(EDGE)) == "agent edge-1"  # a task's queue, a placement
    assert names.label("cloud") == "cloud"
    assert names.label("") == ""
    assert names.agent_name(f"agent:{EDGE}") == "edge-1"
    assert names.agent_name("cloud") == ""


def test_a_shared_name_adds_the_short_id_and_a_lost_agent_says_deleted() -> None:
    names = RuntimeNames.of([_agent(EDGE, "edge-1", active=False), _agent(TWIN, "Edge-1")])
    assert names.label(f"agent:{EDGE}") == "agent edge-1 (4f154cbd)"
    assert names.label(f"agent:{TWIN}") == "agent Edge-1 (9a0c7e21)"
    assert names.label(f"agent:{GONE}") == "agent 77aa88bb (deleted)"
    assert names.agent_name(f"agent:{GONE}") == ""
    alone = RuntimeNames.of([_agent(EDGE, "edge-1"), _agent(TWIN, "edge-2")])
    assert alone.label(str(EDGE)) == "agent edge-1"


def test_texts_the_server_wrote_read_by_name() -> None:
    names = RuntimeNames({EDGE: AgentName(EDGE, "edge-1")})
    said = f"Dispatched extract to agent:{EDGE}; agent:{GONE} stopped heartbeating"
    assert named_agents(said) == {EDGE, GONE}
    assert names.text(said) == (
        "Dispatched extract to agent edge-1; agent 77aa88bb (deleted) stopped heartbeating"
    )
    assert names.text("Task migrate succeeded on cloud") == "Task migrate succeeded on cloud"


def test_a_job_keeps_its_runtimes_and_gains_names_and_labels() -> None:
    job = Job(
        id=uuid4(),
        workspace_id=uuid4(),
        kind=JobKind.RUN,
        state=JobState.FAILED,
        version=3,
        created_at=NOW,
        updated_at=NOW,
        extract_runtime=f"agent:{EDGE}",
        load_runtime="cloud",
        error_message=f"runtime extract: lease expired 3 times: agent:{EDGE}",
    )
    named = RuntimeNames({EDGE: AgentName(EDGE, "edge-1")}).job(job)
    assert (named.extract_runtime, named.load_runtime) == (f"agent:{EDGE}", "cloud")
    assert (named.extract_agent_name, named.load_agent_name) == ("edge-1", "")
    assert (named.extract_runtime_label, named.load_runtime_label) == ("agent edge-1", "cloud")
    assert named.error_message == "runtime extract: lease expired 3 times: agent edge-1"


def test_runtime_agent_reads_both_spellings_and_nothing_else() -> None:
    assert runtime_agent(f"agent:{EDGE}") == runtime_agent(str(EDGE)) == EDGE
    assert runtime_agent("cloud") is None
    assert runtime_agent("agent:nope") is None


def test_the_agents_page_finds_the_run_an_agent_is_executing_by_either_spelling() -> None:
    # Here, not at the top: the monitor's modules are only this test's.
    from setu_server.models import Phase, RunPlacement, RunSnapshot, WriteMode
    from setu_server.web import reads

    placed = RunSnapshot(
        pipeline_name="p",
        source_connection_id=uuid4(),
        destination_connection_id=uuid4(),
        streams=(),
        spec={},
        write_mode=WriteMode.APPEND,
        placement=RunPlacement(EDGE, TWIN),
    )
    base = Job(
        id=uuid4(),
        workspace_id=uuid4(),
        kind=JobKind.RUN,
        state=JobState.RUNNING,
        version=2,
        created_at=NOW,
        updated_at=NOW,
        params=placed,
    )
    # Before its extract ran, the placement's "<id>"; once it runs, the job's "agent:<id>".
    waiting = base
    running = replace(base, phase=Phase.EXTRACT, extract_runtime=f"agent:{EDGE}")
    loading = replace(base, phase=Phase.LOAD, load_runtime=f"agent:{TWIN}")
    assert reads._current_agents(waiting) == (EDGE,)
    assert reads._current_agents(running) == (EDGE,)
    assert reads._current_agents(loading) == (TWIN,)
