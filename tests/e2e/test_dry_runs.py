"""A dry run in each of the four flows, with real processes (the setup of
test_edge_runs: a server with its cloud worker, agents A and B, PostgreSQL,
S3): it plans, writes no destination, stages nothing, and never has the
cloud open an edge connection (whose secrets only the agents hold)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from setu_client import JobState
from setu_engine.staged.s3 import s3_client
from tests.databases import postgres_config
from tests.e2e import test_edge_runs
from tests.e2e.test_edge_runs import Edge, events

pytestmark = pytest.mark.slow
edge = test_edge_runs.edge  # the fixture: a server, its cloud worker, S3, two agents


async def _fetch(url: str, query: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(query)]
    finally:
        await conn.close()


async def _staged_keys(setup: Edge, job_id: str) -> list[str]:
    async with s3_client(setup.s3.settings) as s3:
        listing = await s3.list_objects_v2(Bucket=setup.bucket, Prefix="ws/")
    return [i["Key"] for i in listing.get("Contents", []) if f"/run/{job_id}/" in i["Key"]]


@pytest.mark.parametrize("flow", ["c2c", "a2c", "c2a", "a2a"])
async def test_a_dry_run_plans_and_writes_no_destination(
    edge: Edge, database_url: str, flow: str
) -> None:
    client, (b_id, b_token) = edge.client, edge.agent_b
    a = "agent test agent"  # as the timeline names it
    async with edge.agent("a", edge.tenant.agent_token), edge.agent("b", b_token):
        if flow.startswith("a"):
            source = await client.create_connection(
                "src-edge",
                "postgres",
                edge.edge_config(edge.source),
                "agent",
                str(edge.tenant.agent_id),
            )
        else:
            source = await client.create_connection(
                "src-cloud", "postgres", postgres_config(edge.source)
            )
        if flow.endswith("a"):
            destination = await client.create_connection(
                "dst-edge", "postgres", edge.edge_config(edge.destination), "agent", str(b_id)
            )
        else:
            destination = await client.create_connection(
                "dst-cloud", "postgres", postgres_config(edge.destination)
            )
        table = f"dry_{flow}"
        pipeline = await client.create_pipeline(
            table,
            source.id,
            destination.id,
            streams=["orders"],
            spec={"destination": {"orders": table}},
        )
        job = await client.submit_run(pipeline.id, dry_run=True)
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        timeline = await events(client, job.id)

    assert done.state == JobState.SUCCEEDED, (done.error_message, timeline)
    assert done.result.get("dry_run") is True, done.result
    planned = [(s["stream"], s["destination"], s["actions"]) for s in done.result["streams"]]
    assert planned == [("public.orders", table, [f'create table "public"."{table}"'])]
    # No destination written, nothing staged, no stage but the plan's.
    assert await _fetch(edge.destination, f"SELECT to_regclass('{table}')") == [(None,)]
    assert await _staged_keys(edge, job.id) == []
    kinds = await _fetch(
        database_url, f"SELECT kind FROM task WHERE job_id = '{job.id}' ORDER BY created_at"
    )
    assert kinds == [(k,) for k in TASKS[flow]]
    if flow.startswith("a"):
        assert any(m.startswith("Dispatched discover") and f"to {a}" in m for m in timeline)
    if flow.endswith("a"):
        # The destination was inspected on its own agent (the cloud never
        # resolves its secrets), handed the plan as a load that writes nothing.
        assert any(
            m.startswith("Dispatched load to inspect the destination") and "to agent agent b" in m
            for m in timeline
        ), timeline
        assert any("destination inspected on agent agent b" in m for m in timeline), timeline


# The tasks of a dry run, by flow: the source half where the source is, the
# destination half where the load would run.
TASKS = {
    "c2c": ["migrate"],
    "a2c": ["discover", "migrate"],
    "c2a": ["migrate", "load"],
    "a2a": ["discover", "load"],
}


@pytest.mark.parametrize("flow", ["c2c", "a2c", "c2a", "a2a"])
async def test_a_dry_run_fails_where_the_run_would_wherever_the_destination_is(
    edge: Edge, flow: str
) -> None:
    client, (b_id, b_token) = edge.client, edge.agent_b
    table = f"dry_fail_{flow}"
    # A column the stream sends as text is an integer here, and one it sends
    # is missing while schema_evolution is fail.
    conn = await asyncpg.connect(edge.destination)
    try:
        await conn.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, body integer)")
    finally:
        await conn.close()
    async with edge.agent("a", edge.tenant.agent_token), edge.agent("b", b_token):
        if flow.startswith("a"):
            source = await client.create_connection(
                "src", "postgres", edge.edge_config(edge.source), "agent", str(edge.tenant.agent_id)
            )
        else:
            source = await client.create_connection("src", "postgres", postgres_config(edge.source))
        if flow.endswith("a"):
            destination = await client.create_connection(
                "dst", "postgres", edge.edge_config(edge.destination), "agent", str(b_id)
            )
        else:
            destination = await client.create_connection(
                "dst", "postgres", postgres_config(edge.destination)
            )
        pipeline = await client.create_pipeline(
            table,
            source.id,
            destination.id,
            streams=["orders"],
            spec={"destination": {"orders": table}, "schema_evolution": "fail"},
        )
        job = await client.submit_run(pipeline.id, dry_run=True)
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)

    assert done.state == JobState.FAILED, done
    problems = done.result["incompatibilities"]
    assert len(problems) == 2, problems
    assert "column body" in problems[0] and "integer → text" in problems[0]
    assert "no column(s) amount (numeric)" in problems[1]
    assert done.error_message.startswith("dry run: the run would fail: ")
    assert all(p in done.error_message for p in problems)
    assert await _fetch(edge.destination, f"SELECT count(*) FROM {table}") == [(0,)]


async def test_an_agent_placed_source_is_sampled_on_its_agent(edge: Edge) -> None:
    """The source's agent reads the sample (the cloud never opens the
    source): the orders' `body` is md5 text, declared integer here."""
    client = edge.client
    async with edge.agent("a", edge.tenant.agent_token):
        source = await client.create_connection(
            "src-sampled",
            "postgres",
            edge.edge_config(edge.source),
            "agent",
            str(edge.tenant.agent_id),
        )
        destination = await client.create_connection(
            "dst-sampled", "postgres", postgres_config(edge.destination)
        )
        pipeline = await client.create_pipeline(
            "dry_sampled",
            source.id,
            destination.id,
            streams=["orders"],
            spec={
                "destination": {"orders": "dry_sampled"},
                "columns": {"orders": {"body": "integer"}},
                # Rows the filter drops are never checked; row 1 is.
                "operators": [{"op": "filter", "where": "id > 1"}],
            },
        )
        job = await client.submit_run(pipeline.id, dry_run=True)
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        timeline = await events(client, job.id)

    assert done.state == JobState.FAILED, (done.error_message, timeline)
    plan = done.plan
    assert plan is not None
    (stream,) = plan.streams
    assert stream.sample is not None and stream.sample.fault is not None, stream
    fault = stream.sample.fault
    assert (fault.column, fault.declared_type) == ("body", "integer")
    # Row 2 is the first the filter keeps: its md5 text cannot be an integer.
    assert fault.row == 2, fault
    assert "integer" in fault.error and fault.value.startswith("'"), fault
    assert any(fault.error in p for p in plan.incompatibilities), plan.incompatibilities
    assert any("checked the first" in m and "row 2 would fail" in m for m in timeline), timeline
    assert await _fetch(edge.destination, "SELECT to_regclass('dry_sampled')") == [(None,)]
