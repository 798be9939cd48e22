"""TestConnection, DiscoverStreams and PreviewStream on cloud connections:
run by the cloud worker as jobs, answered synchronously."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from setu_client import JobState, SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_client.errors import Aborted, NotFound
from tests.factories import Tenant, make_tenant
from tests.servers import in_process

S = common_pb2


@pytest.fixture
async def client(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> AsyncIterator[SetuClient]:
    tenant: Tenant = await make_tenant(pool)
    async with (
        in_process(database_url, data_dir=tmp_path / "server") as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as c,
    ):
        yield c


def shop(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price NUMERIC)")
    db.executemany("INSERT INTO items VALUES (?, ?, ?)", [(1, "pen", "1.50"), (2, "ink", "7.25")])
    db.commit()
    db.close()
    return path


async def test_a_cloud_connection_is_tested_discovered_and_previewed_by_the_cloud_worker(
    client: SetuClient, tmp_path: Path
) -> None:
    path = shop(tmp_path / "shop.db")
    conn = await client.create_connection("shop", "sqlite", {"path": str(path)})

    tested = await client.test_connection(conn.id)
    assert tested.ok and tested.runtime == "cloud"
    assert str(path) in tested.message
    assert (await client.get_job(tested.job_id)).kind == S.JOB_KIND_TEST

    found = await client.discover_streams(conn.id)
    [items] = found.streams
    assert (items.name, items.status, list(items.primary_key)) == (
        "items",
        S.CATALOG_STATUS_ACTIVE,
        ["id"],
    )
    assert [(c.name, c.type, c.nullable) for c in items.columns] == [
        ("id", "bigint", False),
        ("name", "text", False),
        ("price", "numeric", True),
    ]

    preview = await client.preview_stream(conn.id, "items", limit=5)
    assert [c.name for c in preview.columns] == ["id", "name", "price"]
    assert [dict(r) for r in preview.rows] == [
        {"id": 1, "name": "pen", "price": "1.5"},  # NUMERIC affinity stored 1.50 as 1.5
        {"id": 2, "name": "ink", "price": "7.25"},
    ]


async def test_failures_reach_the_caller(client: SetuClient, tmp_path: Path) -> None:
    missing = await client.create_connection("gone", "sqlite", {"path": str(tmp_path / "no.db")})
    tested = await client.test_connection(missing.id)
    assert not tested.ok
    assert "no SQLite database at" in tested.message
    # A broken connection's test is a failed job, not a succeeded one.
    job = await client.get_job(tested.job_id)
    assert job.state is JobState.FAILED and job.error_message == tested.message
    with pytest.raises(Aborted, match="no SQLite database at"):
        await client.discover_streams(missing.id)

    conn = await client.create_connection("shop", "sqlite", {"path": str(shop(tmp_path / "s.db"))})
    with pytest.raises(Aborted, match="stream 'nope' not found"):
        await client.preview_stream(conn.id, "nope")
    with pytest.raises(NotFound):
        await client.test_connection("6f1f7c59-2c4f-4d0c-9a53-6fbb8f0e8d11")
