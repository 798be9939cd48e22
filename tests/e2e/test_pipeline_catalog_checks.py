"""A pipeline is checked against its source's catalog at create and update
time, when the catalog is known (the source was discovered): its streams,
its operator chain's columns and its keys, with the messages a run (or a
dry run) gives, since the same engine code produces them
(setu_server/service/pipeline_catalog.py). A source never discovered is not judged."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from setu_client import InvalidArgument, JobState, SetuClient
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


@pytest.fixture
async def ends(client: SetuClient, tmp_path: Path) -> tuple[str, str]:
    with sqlite3.connect(tmp_path / "crm.db") as db:
        db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("CREATE TABLE customer_notes (id INTEGER PRIMARY KEY, body TEXT)")
        db.execute("CREATE TABLE events (at TEXT, what TEXT)")  # no primary key
    source = await client.create_connection("crm", "sqlite", {"path": str(tmp_path / "crm.db")})
    destination = await client.create_connection(
        "dst", "sqlite", {"path": str(tmp_path / "dst.db"), "create": True}
    )
    return source.id, destination.id


async def test_an_unknown_catalog_accepts_anything_a_spec_allows(
    client: SetuClient, ends: tuple[str, str]
) -> None:
    pipeline = await client.create_pipeline("p", *ends, streams=["customerz"])
    assert pipeline.streams == ["customerz"]


async def test_a_stream_the_catalog_lacks_names_it_and_the_close_names(
    client: SetuClient, ends: tuple[str, str]
) -> None:
    await client.discover_streams(ends[0])

    with pytest.raises(InvalidArgument) as refused:
        await client.create_pipeline("p", *ends, streams=["customers", "customerz"])

    message = str(refused.value)
    assert message.startswith("streams: stream 'customerz' not found in the source")
    assert "did you mean 'customers'" in message
    assert "it offers: customer_notes, customers, events" in message


async def test_operator_columns_and_keys_say_what_a_run_would(
    client: SetuClient, ends: tuple[str, str]
) -> None:
    bad_chain = {"operators": [{"op": "rename", "columns": {"nmae": "full_name"}}]}
    # Accepted before discovery: the dry run says why the run would fail.
    before = await client.create_pipeline("before", *ends, streams=["customers"], spec=bad_chain)
    job = await client.submit_run(before.id, dry_run=True)
    await client.wait_for_job(job.id)
    planned = await client.get_job(job.id)
    assert planned.state is JobState.FAILED and planned.plan is not None
    (at_run_time,) = planned.plan.incompatibilities

    await client.discover_streams(ends[0])
    with pytest.raises(InvalidArgument) as refused:
        await client.create_pipeline("p", *ends, streams=["customers"], spec=bad_chain)
    assert at_run_time in str(refused.value)
    assert "unknown column 'nmae'" in at_run_time

    with pytest.raises(InvalidArgument, match="needs a key for stream events"):
        await client.create_pipeline("k", *ends, streams=["events"], write_mode="upsert")
    with pytest.raises(InvalidArgument, match=r"spec.primary_key.customers: unknown column\(s\) x"):
        await client.create_pipeline(
            "k", *ends, streams=["customers"], spec={"primary_key": {"customers": ["x"]}}
        )


async def test_an_update_is_checked_only_where_it_changes_what_the_catalog_judges(
    client: SetuClient, ends: tuple[str, str]
) -> None:
    pipeline = await client.create_pipeline("p", *ends, streams=["customerz"])
    await client.discover_streams(ends[0])

    with pytest.raises(InvalidArgument, match="did you mean 'customers'"):
        await client.update_pipeline(pipeline.id, streams=["customerz", "eventz"])
    # Pausing a pipeline the catalog no longer fits is still possible.
    paused = await client.update_pipeline(pipeline.id, paused=True)
    assert paused.paused
    fixed = await client.update_pipeline(pipeline.id, streams=["customers"])
    assert fixed.streams == ["customers"]
