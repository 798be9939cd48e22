"""A source's names cannot steer where a run writes: every stream lands as
one identifier in the destination connection's configured schema (or
folder); only the pipeline's spec.destination may name another schema
(setu_engine/movement/transfer.py `landing_name`)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import Job, JobState, SetuClient
from tests.databases import postgres_config, scratch_database
from tests.factories import make_tenant
from tests.servers import in_process

# Source tables, all in schema public: a plain one, and names that look
# qualified (dotted, quoted) or like a path.
PLAIN, DOTTED, QUOTED = "victim", "public.victim", 'public"."victim'


@pytest.fixture
async def client(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> AsyncIterator[SetuClient]:
    tenant = await make_tenant(pool)
    async with (
        in_process(database_url, data_dir=tmp_path / "server") as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as c,
    ):
        yield c


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def source_with(url: str, *tables: str) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    try:
        for number, table in enumerate(tables, 1):
            name = f"public.{quote(table)}"
            await conn.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, v text)")
            await conn.execute(f"INSERT INTO {name} VALUES ($1, $2)", number, table)
    finally:
        await conn.close()
    return postgres_config(url)


async def tables_of(url: str) -> dict[tuple[str, str], list[tuple[Any, ...]]]:
    conn = await asyncpg.connect(url)
    try:
        names = await conn.fetch(
            "SELECT schemaname, tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema') "
            "AND tablename <> '_setu_loads'"  # the load markers: markers_of
        )
        return {
            (r[0], r[1]): [
                tuple(row)
                for row in await conn.fetch(f"SELECT id, v FROM {quote(r[0])}.{quote(r[1])}")
            ]
            for r in names
        }
    finally:
        await conn.close()


async def markers_of(url: str) -> list[tuple[str, int]]:
    """The schemas that hold load markers, and how many each holds."""
    conn = await asyncpg.connect(url)
    try:
        schemas = await conn.fetch(
            "SELECT schemaname FROM pg_tables WHERE tablename = '_setu_loads' ORDER BY 1"
        )
        return [
            (r[0], await conn.fetchval(f"SELECT count(*) FROM {quote(r[0])}._setu_loads"))
            for r in schemas
        ]
    finally:
        await conn.close()


def files_under(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.jsonl"))


async def run(
    client: SetuClient,
    source: tuple[str, dict[str, Any]],
    destination: tuple[str, dict[str, Any]],
    spec: dict[str, Any] | None = None,
) -> Job:
    tag = uuid.uuid4().hex[:8]
    src = await client.create_connection(f"source-{tag}", *source)
    dst = await client.create_connection(f"destination-{tag}", *destination)
    pipeline = await client.create_pipeline(f"names-{tag}", src.id, dst.id, spec=spec)
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    return await client.get_job(job.id)


async def test_source_names_land_as_one_table_in_the_configured_schema(
    client: SetuClient, pg_server_url: str
) -> None:
    async with (
        scratch_database(pg_server_url) as source_url,
        scratch_database(pg_server_url) as destination_url,
    ):
        source = await source_with(source_url, PLAIN, DOTTED, QUOTED)
        admin = await asyncpg.connect(destination_url)
        await admin.execute("CREATE SCHEMA landing")
        await admin.close()
        destination = postgres_config(destination_url) | {"schema": "landing"}

        job = await run(client, ("postgres", source), ("postgres", destination))

        assert job.state is JobState.SUCCEEDED, job.error_message
        assert await tables_of(destination_url) == {
            ("landing", PLAIN): [(1, PLAIN)],
            ("landing", DOTTED): [(2, DOTTED)],
            ("landing", QUOTED): [(3, QUOTED)],
        }
        assert await markers_of(destination_url) == [("landing", 3)]


async def test_only_the_pipelines_destination_mapping_names_another_schema(
    client: SetuClient, pg_server_url: str
) -> None:
    async with (
        scratch_database(pg_server_url) as source_url,
        scratch_database(pg_server_url) as destination_url,
    ):
        source = await source_with(source_url, PLAIN, DOTTED)
        admin = await asyncpg.connect(destination_url)
        await admin.execute("CREATE SCHEMA landing; CREATE SCHEMA archive")
        await admin.close()
        destination = postgres_config(destination_url) | {"schema": "landing"}
        spec = {"destination": {PLAIN: "archive.kept"}}

        job = await run(client, ("postgres", source), ("postgres", destination), spec)

        assert job.state is JobState.SUCCEEDED, job.error_message
        assert await tables_of(destination_url) == {
            ("archive", "kept"): [(1, PLAIN)],
            ("landing", DOTTED): [(2, DOTTED)],
        }
        # The markers stay in the connection's schema, wherever a stream lands.
        assert await markers_of(destination_url) == [("landing", 2)]


async def test_a_stream_named_like_a_path_stays_in_the_destination_folder(
    client: SetuClient, pg_server_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "out" / "in"
    folder.mkdir(parents=True)
    async with scratch_database(pg_server_url) as source_url:
        source = await source_with(source_url, "../escape")
        destination = ("file", {"url": str(folder), "format": "jsonl"})

        refused = await run(client, ("postgres", source), destination)
        timeline = [e.message async for e in client.job_events(refused.id)]
        mapped = await run(
            client, ("postgres", source), destination, {"destination": {"../escape": "escape"}}
        )

    assert refused.state is JobState.FAILED
    assert "stream name '../escape' cannot name a file" in refused.error_message
    assert not [m for m in timeline if "retrying" in m]  # no attempt can fix a name
    assert mapped.state is JobState.SUCCEEDED, mapped.error_message
    assert files_under(tmp_path) == ["out/in/escape.jsonl"]
