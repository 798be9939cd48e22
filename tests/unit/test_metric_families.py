"""The metric families on their own: what each recording call moves."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from setu_client.clock import FakeClock
from setu_server.metrics import Metrics, TaskCount, flow_of
from setu_server.models import Agent, Job, JobKind, JobState, RunPlacement, RunSnapshot, WriteMode

START = datetime(2030, 1, 1, tzinfo=UTC)


def sample(metrics: Metrics, metric: str, /, **labels: str) -> float:
    return metrics.registry.get_sample_value(metric, labels) or 0.0


def run(state: JobState, *, extract_agent: uuid.UUID | None = None) -> Job:
    snapshot = RunSnapshot(
        pipeline_name="p",
        source_connection_id=uuid.uuid4(),
        destination_connection_id=uuid.uuid4(),
        streams=(),
        spec={},
        write_mode=WriteMode.APPEND,
        placement=RunPlacement(extract_agent, None),
    )
    return Job(
        id=uuid.uuid4(),
        workspace_id=uuid.uuid4(),
        kind=JobKind.RUN,
        state=state,
        version=3,
        created_at=START,
        updated_at=START,
        pipeline_id=uuid.uuid4(),
        params=snapshot,
        rows_extracted=10,
        rows_loaded=8,
        started_at=START,
        finished_at=START + timedelta(seconds=42),
    )


def test_long_polls_are_timed_apart_from_short_calls() -> None:
    metrics = Metrics(process=False)
    metrics.handled("/setu.v1.JobOrchestrationService/WaitJob", "OK", 59.0)
    metrics.handled("/setu.v1.JobOrchestrationService/GetJob", "NOT_FOUND", 0.002)
    wait = {"grpc_service": "setu.v1.JobOrchestrationService", "grpc_method": "WaitJob"}
    get = wait | {"grpc_method": "GetJob"}
    assert sample(metrics, "setu_grpc_server_long_poll_seconds_count", **wait) == 1
    assert sample(metrics, "setu_grpc_server_handling_seconds_count", **wait) == 0
    assert sample(metrics, "setu_grpc_server_handling_seconds_count", **get) == 1
    assert sample(metrics, "setu_grpc_server_handled_total", **get, grpc_code="NOT_FOUND") == 1


def test_only_long_polls_count_as_parked_and_only_while_open() -> None:
    metrics = Metrics(process=False)
    lease = {"grpc_service": "setu.v1.AgentService", "grpc_method": "LeaseTask"}
    with metrics.parking("/setu.v1.AgentService/LeaseTask"):
        with metrics.parking("/setu.v1.AgentService/Heartbeat"):
            assert sample(metrics, "setu_grpc_server_parked_calls", **lease) == 1
            beat = lease | {"grpc_method": "Heartbeat"}
            assert sample(metrics, "setu_grpc_server_parked_calls", **beat) == 0
    assert sample(metrics, "setu_grpc_server_parked_calls", **lease) == 0


def test_an_ended_run_records_its_duration_and_rows_and_a_running_one_does_not() -> None:
    metrics = Metrics(process=False)
    running = run(JobState.RUNNING)
    metrics.job_moved(running)
    assert sample(metrics, "setu_job_transitions_total", kind="run", state="running") == 1
    pipeline = str(running.pipeline_id)
    assert sample(metrics, "setu_run_rows_loaded_total", pipeline=pipeline) == 0
    ended = replace(running, state=JobState.FAILED)
    metrics.job_moved(ended)
    flow = {"flow": "cloud_to_cloud", "state": "failed"}
    assert sample(metrics, "setu_run_duration_seconds_sum", **flow) == 42
    assert sample(metrics, "setu_run_rows_extracted_total", pipeline=pipeline) == 10
    assert sample(metrics, "setu_run_rows_loaded_total", pipeline=pipeline) == 8


def test_flows_are_named_by_where_each_stage_runs() -> None:
    assert flow_of(run(JobState.SUCCEEDED, extract_agent=uuid.uuid4())) == "agent_to_cloud"
    assert flow_of(replace(run(JobState.SUCCEEDED), params=None)) == "unknown"


def test_a_refresh_that_read_an_older_check_in_keeps_the_newer_one() -> None:
    clock = FakeClock(START)
    metrics = Metrics(clock, process=False)
    agent = Agent(
        id=uuid.uuid4(),
        workspace_id=uuid.uuid4(),
        name="edge-1",
        active=True,
        version="1",
        capabilities=[],
        hostname="h",
        last_seen_at=START - timedelta(seconds=40),
        created_at=START,
    )
    # The refresh's query began before this check-in and returns after it.
    metrics.agent_seen(replace(agent, last_seen_at=START))
    metrics.agents_listed([agent])
    clock.advance(5)
    age = {"agent": str(agent.id), "name": "edge-1"}
    assert sample(metrics, "setu_agent_last_seen_age_seconds", **age) == 5
    # An agent gone from the refresh (deactivated) is gone from the figures.
    metrics.agents_listed([])
    assert metrics.registry.get_sample_value("setu_agent_last_seen_age_seconds", age) is None


def test_the_task_census_replaces_the_last_one() -> None:
    metrics = Metrics(process=False)
    metrics.tasks_counted([TaskCount("cloud", "migrate", "pending", 3)])
    metrics.tasks_counted([TaskCount("cloud", "migrate", "leased", 1)])
    pending = {"runtime": "cloud", "kind": "migrate", "state": "pending"}
    assert metrics.registry.get_sample_value("setu_tasks", pending) is None
    assert sample(metrics, "setu_tasks", **pending | {"state": "leased"}) == 1


def test_only_long_polls_cut_before_they_answered_count_as_cuts() -> None:
    metrics = Metrics(process=False)
    assert metrics.long_poll_cut("/setu.v1.JobOrchestrationService/WaitJob")
    assert metrics.long_poll_cut("/setu.v1.AgentService/LeaseTask")
    assert metrics.long_poll_cut("/setu.v1.AgentService/LeaseTask")
    assert not metrics.long_poll_cut("/setu.v1.JobOrchestrationService/GetJob")
    assert sample(metrics, "setu_long_poll_cuts_total", method="WaitJob") == 1
    assert sample(metrics, "setu_long_poll_cuts_total", method="LeaseTask") == 2
    assert sample(metrics, "setu_long_poll_cuts_total", method="GetJob") == 0
