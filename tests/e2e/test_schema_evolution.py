"""The destination adapts (setu_engine/planning/destination_plan.py): a missing schema is
created, a column the table lacks is added (schema_evolution add_columns,
the default) with an event saying so, `fail` refuses naming the columns,
and a column type change is refused, naming stream, column and both types.
Real runs through an in-process server and its cloud worker, on real
PostgreSQL and a real SQLite file, direct and staged."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import Job, JobState, SetuClient
from tests.databases import postgres_config
from tests.e2e import test_edge_runs
from tests.e2e.test_edge_runs import Edge
from tests.factories import Tenant
from tests.servers import in_process

pytestmark = pytest.mark.slow


@pytest.fixture(params=["direct", "staged"])
async def client(
    request: pytest.FixtureRequest, database_url: str, tenant: Tenant, tmp_path: Path
) -> AsyncIterator[SetuClient]:
    # 0 rows at most go direct: every run stages.
    limit = {"direct": 1_000_000, "staged": 0}[request.param]
    async with (
        in_process(database_url, data_dir=tmp_path / "server", direct_max_rows=limit) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as c,
    ):
        yield c


async def execute(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def fetch(url: str, query: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(query)]
    finally:
        await conn.close()


async def run(
    client: SetuClient, source: str, destination: dict[str, Any], spec: dict[str, Any]
) -> tuple[Job, list[str]]:
    src = await client.create_connection("src", "postgres", postgres_config(source))
    provider = "sqlite" if "path" in destination else "postgres"
    dst = await client.create_connection("dst", provider, destination)
    pipeline = await client.create_pipeline("evolve", src.id, dst.id, streams=["orders"], spec=spec)
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    timeline = [e.message async for e in client.job_events(job.id)]
    return await client.get_job(job.id), timeline


SOURCE = (
    "CREATE TABLE orders (id bigint PRIMARY KEY, amount integer, note text)",
    "INSERT INTO orders VALUES (1, 10, 'a'), (2, 20, NULL)",
)


async def test_a_column_the_table_lacks_is_added_with_an_event(
    client: SetuClient, databases: tuple[str, str]
) -> None:
    source, destination = databases
    await execute(source, *SOURCE)
    await execute(destination, "CREATE TABLE orders (id bigint PRIMARY KEY, amount integer)")

    done, timeline = await run(client, source, postgres_config(destination), {})

    assert done.state is JobState.SUCCEEDED, (done.error_message, timeline)
    assert await fetch(destination, "SELECT id, amount, note FROM orders ORDER BY id") == [
        (1, 10, "a"),
        (2, 20, None),
    ]
    assert any(
        "Added column(s) note (text)" in m and "schema_evolution: add_columns" in m
        for m in timeline
    ), timeline


async def test_schema_evolution_fail_refuses_naming_the_columns(
    client: SetuClient, databases: tuple[str, str]
) -> None:
    source, destination = databases
    await execute(source, *SOURCE)
    await execute(destination, "CREATE TABLE orders (id bigint PRIMARY KEY, amount integer)")

    done, timeline = await run(
        client, source, postgres_config(destination), {"schema_evolution": "fail"}
    )

    assert done.state is JobState.FAILED, timeline
    assert "has no column(s) note (text)" in done.error_message
    assert "schema_evolution is fail" in done.error_message
    assert await fetch(destination, "SELECT count(*) FROM orders") == [(0,)]
    columns = await fetch(
        destination,
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'orders'",
    )
    assert ("note",) not in columns


async def test_a_column_type_change_is_refused(
    client: SetuClient, databases: tuple[str, str]
) -> None:
    source, destination = databases
    await execute(source, *SOURCE)
    await execute(
        destination, "CREATE TABLE orders (id bigint PRIMARY KEY, amount integer, note integer)"
    )

    done, timeline = await run(client, source, postgres_config(destination), {})

    assert done.state is JobState.FAILED, timeline
    message = done.error_message
    assert "orders, column note" in message, message
    assert "integer → text" in message, message
    assert await fetch(destination, "SELECT count(*) FROM orders") == [(0,)]


async def test_a_missing_schema_is_created(client: SetuClient, databases: tuple[str, str]) -> None:
    source, destination = databases
    await execute(source, *SOURCE)

    done, timeline = await run(
        client, source, postgres_config(destination), {"destination": {"orders": "edge.orders"}}
    )

    assert done.state is JobState.SUCCEEDED, (done.error_message, timeline)
    assert await fetch(destination, "SELECT count(*) FROM edge.orders") == [(2,)]
    assert any("Created schema edge" in m for m in timeline), timeline


async def test_sqlite_adds_a_column_and_refuses_a_type_change(
    client: SetuClient, databases: tuple[str, str], tmp_path: Path
) -> None:
    source, _ = databases
    await execute(source, *SOURCE)
    path = tmp_path / "dst.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, amount INT4)")
        conn.execute("CREATE TABLE typed (id BIGINT PRIMARY KEY, amount INT4, note INT4)")

    done, timeline = await run(client, source, {"path": str(path)}, {})

    assert done.state is JobState.SUCCEEDED, (done.error_message, timeline)
    assert any("Added column(s) note (text)" in m for m in timeline), timeline
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT id, note FROM orders ORDER BY id").fetchall() == [
            (1, "a"),
            (2, None),
        ]

    src = await client.create_connection("src2", "postgres", postgres_config(source))
    dst = await client.create_connection("dst2", "sqlite", {"path": str(path)})
    pipeline = await client.create_pipeline(
        "typed", src.id, dst.id, streams=["orders"], spec={"destination": {"orders": "typed"}}
    )
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    failed = await client.get_job(job.id)
    assert failed.state is JobState.FAILED
    assert "orders, column note" in failed.error_message
    assert "INT4 → text" in failed.error_message


edge = test_edge_runs.edge  # a server process, its cloud worker, S3, two agents


async def test_an_agent_s_load_adds_the_column_and_the_timeline_says_so(edge: Edge) -> None:
    """cloud → agent: the load runs on the destination's agent, which adds
    the column; its event reaches the job's timeline through the result."""
    client, (b_id, b_token) = edge.client, edge.agent_b
    await execute(edge.destination, "CREATE TABLE orders (id integer PRIMARY KEY, body text)")
    async with edge.agent("b", b_token):
        src = await client.create_connection("src", "postgres", postgres_config(edge.source))
        dst = await client.create_connection(
            "dst", "postgres", edge.edge_config(edge.destination), "agent", str(b_id)
        )
        pipeline = await client.create_pipeline("evolve", src.id, dst.id, streams=["orders"])
        job = await client.submit_run(pipeline.id)
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        timeline = [e.message async for e in client.job_events(job.id)]

    assert done.state is JobState.SUCCEEDED, (done.error_message, timeline)
    assert any(
        m.startswith('Added column(s) amount (numeric) to "public"."orders"')
        and m.endswith("on agent agent b")  # the timeline names the agent
        for m in timeline
    ), timeline
    assert await fetch(edge.destination, "SELECT count(amount) FROM orders") == [
        (test_edge_runs.ROWS,)
    ]
