"""A dry run is a plan (setu_engine/movement/dry_run.py,
setu_engine/planning/destination_plan.py): per stream the rows, the
destination's actions, the columns after the operator
chain, and every incompatibility the real run would meet, with nothing
written; it fails exactly when the run would, with the run's own words.
In-process server and cloud worker, real PostgreSQL (the four flows, with
agents, are in test_dry_runs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import Job, JobState, SetuClient
from tests.databases import postgres_config
from tests.factories import Tenant
from tests.servers import in_process

pytestmark = pytest.mark.slow


@pytest.fixture
async def client(database_url: str, tenant: Tenant, tmp_path: Path) -> AsyncIterator[SetuClient]:
    async with (
        in_process(database_url, data_dir=tmp_path / "server") as server,
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


SOURCE = (
    "CREATE TABLE orders (id bigint PRIMARY KEY, name text, amount numeric(10,2))",
    "INSERT INTO orders VALUES (1, 'a', 1.50), (2, 'b', NULL)",
    "CREATE TABLE events (at timestamptz, what text)",  # no primary key
    "INSERT INTO events VALUES (now(), 'x')",
)


class Pipeline:
    def __init__(self, client: SetuClient, databases: tuple[str, str]) -> None:
        self.client = client
        self.source, self.destination = databases
        self.count = 0

    async def submit(
        self, *, dry_run: bool = True, streams: tuple[str, ...] = ("orders",), **fields: Any
    ) -> Job:
        self.count += 1
        src = await self.client.create_connection(
            f"src{self.count}", "postgres", postgres_config(self.source)
        )
        dst = await self.client.create_connection(
            f"dst{self.count}", "postgres", postgres_config(self.destination)
        )
        pipeline = await self.client.create_pipeline(
            f"p{self.count}", src.id, dst.id, streams=list(streams), **fields
        )
        job = await self.client.submit_run(pipeline.id, dry_run=dry_run)
        await self.client.wait_for_job(job.id)
        return await self.client.get_job(job.id)


@pytest.fixture
async def pipeline(client: SetuClient, databases: tuple[str, str]) -> Pipeline:
    await execute(databases[0], *SOURCE)
    return Pipeline(client, databases)


def only_stream(job: Job) -> dict[str, Any]:
    streams = job.result["streams"]
    assert len(streams) == 1, streams
    stream: dict[str, Any] = streams[0]
    return stream


async def test_on_a_clean_destination_it_plans_a_table_and_the_chain_s_columns(
    pipeline: Pipeline,
) -> None:
    spec = {
        "operators": [
            {"op": "rename", "columns": {"name": "full_name"}},
            {"op": "constant", "column": "origin", "value": "crm", "type": "text"},
        ]
    }

    done = await pipeline.submit(spec=spec)

    assert done.state is JobState.SUCCEEDED, done.error_message
    planned = only_stream(done)
    assert planned["rows_estimate"] >= 0
    assert planned["actions"] == ['create table "public"."orders"']
    assert planned["incompatibilities"] == []
    mapping = [(m["source"], m["column"], m["destination_type"]) for m in planned["mapping"]]
    assert mapping == [
        ("id", "id", ""),
        ("name", "full_name", ""),
        ("amount", "amount", ""),
        ("", "origin", ""),
    ]
    assert planned["key"] == ["id"]
    assert await fetch(pipeline.destination, "SELECT to_regclass('orders')") == [(None,)]


async def test_on_an_existing_table_it_appends_and_adds_the_missing_columns(
    pipeline: Pipeline,
) -> None:
    await execute(pipeline.destination, "CREATE TABLE orders (id bigint, name varchar(20))")

    done = await pipeline.submit()

    assert done.state is JobState.SUCCEEDED, done.error_message
    planned = only_stream(done)
    assert planned["actions"] == [
        "add column(s) amount (numeric(10,2))",
        'append to the existing table "public"."orders"',
    ]
    types = {m["column"]: m["destination_type"] for m in planned["mapping"]}
    assert types == {"id": "bigint", "name": "character varying(20)", "amount": ""}
    # Planned, not done: the table is as it was.
    columns = await fetch(
        pipeline.destination,
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'orders'",
    )
    assert sorted(columns) == [("id",), ("name",)]


async def test_a_missing_schema_is_planned_for_creation(pipeline: Pipeline) -> None:
    done = await pipeline.submit(spec={"destination": {"orders": "edge.orders"}})

    assert done.state is JobState.SUCCEEDED, done.error_message
    assert only_stream(done)["actions"] == ["create schema edge", 'create table "edge"."orders"']
    assert await fetch(pipeline.destination, "SELECT to_regnamespace('edge')") == [(None,)]


async def test_missing_columns_under_schema_evolution_fail(pipeline: Pipeline) -> None:
    await execute(pipeline.destination, "CREATE TABLE orders (id bigint, name text)")

    done = await pipeline.submit(spec={"schema_evolution": "fail"})

    assert done.state is JobState.FAILED
    (problem,) = only_stream(done)["incompatibilities"]
    assert "has no column(s) amount (numeric(10,2))" in problem
    assert "schema_evolution is fail" in problem
    assert problem in done.error_message


async def test_a_column_type_change(pipeline: Pipeline) -> None:
    await execute(
        pipeline.destination, "CREATE TABLE orders (id bigint, name integer, amount date)"
    )

    done = await pipeline.submit()

    assert done.state is JobState.FAILED
    problems = only_stream(done)["incompatibilities"]
    assert len(problems) == 2, problems
    assert "column name" in problems[0] and "integer → text" in problems[0]
    assert "column amount" in problems[1] and "date → numeric" in problems[1]


async def test_a_cast_that_cannot_be_made(pipeline: Pipeline) -> None:
    spec = {"operators": [{"op": "cast", "columns": {"amount": "uuid"}}]}

    done = await pipeline.submit(spec=spec)

    assert done.state is JobState.FAILED
    (problem,) = only_stream(done)["incompatibilities"]
    assert problem.startswith("stream public.orders: spec.operators[0]"), problem
    assert "uuid" in problem


async def test_an_unknown_column_in_the_chain(pipeline: Pipeline) -> None:
    spec = {"operators": [{"op": "drop", "columns": ["nope"]}]}

    done = await pipeline.submit(spec=spec)

    assert done.state is JobState.FAILED
    (problem,) = only_stream(done)["incompatibilities"]
    assert "unknown column 'nope'" in problem


async def test_a_key_the_write_mode_needs_and_the_stream_lacks(pipeline: Pipeline) -> None:
    done = await pipeline.submit(streams=("events",), write_mode="upsert")

    assert done.state is JobState.FAILED
    (problem,) = only_stream(done)["incompatibilities"]
    assert "write mode upsert needs a key for stream public.events" in problem


async def test_a_key_the_existing_table_has_no_unique_index_on(pipeline: Pipeline) -> None:
    await execute(
        pipeline.destination, "CREATE TABLE orders (id bigint, name text, amount numeric)"
    )

    done = await pipeline.submit(write_mode="upsert")

    assert done.state is JobState.FAILED
    (problem,) = only_stream(done)["incompatibilities"]
    assert "needs a primary key or unique index on (id)" in problem


async def test_a_required_column_the_stream_does_not_send(pipeline: Pipeline) -> None:
    await execute(
        pipeline.destination,
        "CREATE TABLE orders (id bigint, name text, amount numeric, region text NOT NULL)",
    )

    done = await pipeline.submit()

    assert done.state is JobState.FAILED
    (problem,) = only_stream(done)["incompatibilities"]
    assert "destination column region" in problem and "NOT NULL" in problem


async def test_every_stream_is_planned_and_every_problem_listed(pipeline: Pipeline) -> None:
    await execute(pipeline.destination, "CREATE TABLE orders (id bigint, name integer)")

    done = await pipeline.submit(streams=("orders", "events"), write_mode="upsert")

    assert done.state is JobState.FAILED
    problems = done.result["incompatibilities"]
    assert [p.split(":")[0].split(",")[0] for p in problems] == [
        "stream public.orders",
        "stream public.orders",
        "write mode upsert needs a key for stream public.events",
    ], problems


async def test_the_real_run_fails_as_the_dry_run_said(pipeline: Pipeline) -> None:
    await execute(pipeline.destination, "CREATE TABLE orders (id bigint, name integer)")

    planned = await pipeline.submit()
    ran = await pipeline.submit(dry_run=False)

    assert planned.state is JobState.FAILED and ran.state is JobState.FAILED
    (problem,) = only_stream(planned)["incompatibilities"]
    assert problem in ran.error_message
    assert await fetch(pipeline.destination, "SELECT count(*) FROM orders") == [(0,)]
