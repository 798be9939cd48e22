"""What a cloud connection may reach: files under SETU_LOCAL_FILES_ROOT
only, and S3 with its own credentials (setu_server/worker/policy.py)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from tests.databases import postgres_config
from tests.factories import Tenant, make_tenant
from tests.servers import in_process

S = common_pb2


@pytest.fixture
async def client(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> AsyncIterator[SetuClient]:
    tenant: Tenant = await make_tenant(pool)
    async with (
        in_process(
            database_url,
            data_dir=tmp_path / "server",
            local_files_root=str(tmp_path / "files"),
            cloud_allow_networks="",
        ) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as c,
    ):
        yield c


def database(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    db.commit()
    db.close()
    return str(path)


async def test_a_cloud_connection_reaches_files_only_under_the_root(
    client: SetuClient, tmp_path: Path
) -> None:
    inside = await client.create_connection(
        "inside", "sqlite", {"path": database(tmp_path / "files" / "a.db")}
    )
    assert (await client.test_connection(inside.id)).ok

    outside = await client.create_connection(
        "outside", "sqlite", {"path": database(tmp_path / "elsewhere.db")}
    )
    refused = await client.test_connection(outside.id)
    assert not refused.ok
    assert "may only use files under" in refused.message

    sneaky = await client.create_connection(
        "sneaky", "file", {"url": str(tmp_path / "files" / ".." / "server"), "format": "jsonl"}
    )
    assert "may only use files under" in (await client.test_connection(sneaky.id)).message

    # A run that would write outside the root fails at once, not after retries.
    pipeline = await client.create_pipeline("out", inside.id, sneaky.id)
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    assert done.state == S.JOB_STATE_FAILED
    assert "may only use files under" in done.error_message


async def test_a_cloud_file_connection_on_s3_brings_its_own_credentials(
    client: SetuClient,
) -> None:
    bare = await client.create_connection(
        "bare", "file", {"url": "s3://setu-blobs/", "format": "csv"}
    )
    refused = await client.test_connection(bare.id)
    assert not refused.ok
    assert "brings its own credentials" in refused.message


async def test_a_workspace_secret_serves_only_its_workspace_in_the_cloud(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    owner, other = await make_tenant(pool), await make_tenant(pool)
    secrets = tmp_path / "secrets.json"
    secrets.write_text(
        json.dumps({"workspaces": {str(owner.workspace_id): {"PG_USER": "postgres"}}})
    )
    config = postgres_config(database_url) | {"user": {"$secret": "PG_USER"}}
    async with in_process(database_url, secrets_file=str(secrets)) as server:
        answers = []
        for tenant in (owner, other):
            async with SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client:
                conn = await client.create_connection("db", "postgres", config)
                answers.append(await client.test_connection(conn.id))

    assert answers[0].ok, answers[0].message
    assert not answers[1].ok
    assert "secret 'PG_USER' is not among this workspace's cloud secrets" in answers[1].message
    assert f"workspaces.{other.workspace_id}" in answers[1].message


async def test_a_cloud_postgres_connection_cannot_reach_the_servers_own_sockets_or_loopback(
    client: SetuClient, database_url: str
) -> None:
    # The embedded PostgreSQL's socket folder lies outside the files root.
    own = await client.create_connection("own", "postgres", postgres_config(database_url))
    refused = await client.test_connection(own.id)
    assert not refused.ok
    assert "config.host: a cloud connection may only use files under" in refused.message

    loop = await client.create_connection(
        "loop", "postgres", {"host": "127.0.0.1", "database": "setu", "user": "postgres"}
    )
    refused = await client.test_connection(loop.id)
    assert not refused.ok
    assert "config.host: resolves to a loopback address" in refused.message


async def test_a_one_person_server_lets_the_cloud_reach_its_own_machine(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant: Tenant = await make_tenant(pool)
    async with (
        in_process(
            database_url, local_files_root=str(tmp_path / "files"), cloud_reach="local"
        ) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        outside = await client.create_connection(
            "outside", "sqlite", {"path": database(tmp_path / "elsewhere.db")}
        )
        assert (await client.test_connection(outside.id)).ok
        own = await client.create_connection("own", "postgres", postgres_config(database_url))
        assert (await client.test_connection(own.id)).ok
