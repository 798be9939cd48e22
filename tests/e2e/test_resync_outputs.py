"""A run's outputs say what each stream's load did (docs/flows.md): a second
upsert run of an unchanged table reports every row unchanged, through the SDK's
job outputs, the CLI's table and the run's timeline, staged or direct."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from setu_cli.render import outputs_table
from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_client.errors import InvalidArgument
from tests.databases import postgres_config

S = common_pb2
ROWS = 40


async def prepare(source: str) -> None:
    conn = await asyncpg.connect(source)
    try:
        await conn.execute(
            "CREATE TABLE items AS SELECT i AS id, 'item ' || i AS name, i * 1.5 AS price "
            "FROM generate_series(1, $1) i",
            ROWS,
        )
        await conn.execute("ALTER TABLE items ADD PRIMARY KEY (id)")
    finally:
        await conn.close()


async def run(client: SetuClient, pipeline_id: str) -> Any:
    job = await client.submit_run(pipeline_id)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    assert done.state == S.JOB_STATE_SUCCEEDED, done.error_message
    return done


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
async def test_a_second_upsert_run_reports_every_row_unchanged(
    client_for: Any, databases: tuple[str, str], direct: bool
) -> None:
    source, destination = databases
    await prepare(source)
    _, client = await client_for(direct_max_rows=ROWS if direct else 0)
    src = await client.create_connection("src", "postgres", postgres_config(source))
    dst = await client.create_connection("dst", "postgres", postgres_config(destination))
    pipeline = await client.create_pipeline("items", src.id, dst.id, write_mode="upsert")

    first = await run(client, pipeline.id)
    outputs = await client.job_outputs(first.id)
    (stream,) = outputs.streams
    assert (stream.inserted, stream.updated, stream.unchanged) == (ROWS, 0, 0)

    conn = await asyncpg.connect(source)
    try:
        await conn.execute("UPDATE items SET price = price + 1 WHERE id <= 3")
    finally:
        await conn.close()
    second = await run(client, pipeline.id)
    outputs = await client.job_outputs(second.id)
    (stream,) = outputs.streams
    assert (stream.inserted, stream.updated, stream.unchanged) == (0, 3, ROWS - 3)
    assert (stream.rows_loaded, stream.rows_extracted) == (ROWS, ROWS)

    third = await run(client, pipeline.id)
    outputs = await client.job_outputs(third.id)
    (stream,) = outputs.streams
    assert (stream.inserted, stream.updated, stream.unchanged) == (0, 0, ROWS)
    header, row = outputs_table(outputs).splitlines()[:2]
    assert header.split() == [
        "STREAM",
        "EXTRACTED",
        "LOADED",
        "INSERTED",
        "UPDATED",
        "UNCHANGED",
        "CHECKSUM",
    ]
    assert row.split()[1:6] == [str(ROWS), str(ROWS), "0", "0", str(ROWS)]
    timeline = [e.message async for e in client.job_events(third.id)]
    assert any(f"(0 inserted, 0 updated, {ROWS} unchanged)" in m for m in timeline), timeline


async def test_declared_column_types_are_checked_at_create_and_update(
    client_for: Any, databases: tuple[str, str]
) -> None:
    source, destination = databases
    _, client = await client_for()
    src = await client.create_connection("src", "postgres", postgres_config(source))
    dst = await client.create_connection("dst", "postgres", postgres_config(destination))
    bad = {"columns": {"items": {"price": "money); DROP TABLE items; --"}}}
    with pytest.raises(InvalidArgument, match=r"spec\.columns\.items\.price: unknown type"):
        await client.create_pipeline("items", src.id, dst.id, spec=bad)
    good = {"columns": {"items": {"price": "numeric(8,2)", "name": "varchar(40)"}}}
    pipeline = await client.create_pipeline("items", src.id, dst.id, spec=good)
    with pytest.raises(InvalidArgument, match=r"spec\.columns\.items\.name: .*out of range"):
        await client.update_pipeline(
            pipeline.id, spec={"columns": {"items": {"name": "varchar(0)"}}}
        )
