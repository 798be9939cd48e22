"""What a cloud connection may reach: its workspace's own files under
SETU_LOCAL_FILES_ROOT only, and S3 with its own credentials
(setu_agent/cloud/policy.py, setu_engine/providers/files/storage.py)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from setu_client import Job, JobState, SetuClient
from setu_client.errors import Aborted
from tests.databases import postgres_config
from tests.factories import Tenant, make_tenant
from tests.servers import in_process

USERS = "id,name\n1,ada\n2,alan\n"


@dataclass
class Workspace:
    client: SetuClient
    folder: Path  # <files root>/<workspace id>/


@pytest.fixture
async def two(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> AsyncIterator[tuple[Workspace, Workspace]]:
    """Workspaces A and B on one server whose files root is tmp/files."""
    root = tmp_path / "files"
    tenants: list[Tenant] = [await make_tenant(pool), await make_tenant(pool)]
    async with (
        in_process(
            database_url,
            data_dir=tmp_path / "server",
            local_files_root=str(root),
            cloud_allow_networks="",
        ) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenants[0].api_key) as a,
        SetuClient(f"127.0.0.1:{server.port}", tenants[1].api_key) as b,
    ):
        folders = [root / str(t.workspace_id) for t in tenants]
        for folder in folders:
            folder.mkdir(parents=True)
        yield Workspace(a, folders[0]), Workspace(b, folders[1])


@pytest.fixture
def client(two: tuple[Workspace, Workspace]) -> SetuClient:
    return two[0].client


def database(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    db.commit()
    db.close()
    return str(path)


def tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


async def refusal(client: SetuClient, provider: str, config: dict[str, object]) -> str:
    made = await client.create_connection(f"c{os.urandom(4).hex()}", provider, config)
    tested = await client.test_connection(made.id)
    assert not tested.ok, (config, tested.message)
    return tested.message


async def run(client: SetuClient, source: str, destination: str) -> Job:
    pipeline = await client.create_pipeline(f"p{os.urandom(4).hex()}", source, destination)
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    return await client.get_job(job.id)


async def test_a_cloud_connection_reaches_files_only_in_its_workspace_folder(
    two: tuple[Workspace, Workspace], tmp_path: Path
) -> None:
    a, _ = two
    database(a.folder / "a.db")
    relative = await a.client.create_connection("relative", "sqlite", {"path": "a.db"})
    tested = await a.client.test_connection(relative.id)
    assert tested.ok and str(a.folder / "a.db") in tested.message
    absolute = await a.client.create_connection(
        "absolute", "sqlite", {"path": str(a.folder / "a.db")}
    )
    assert (await a.client.test_connection(absolute.id)).ok

    # Beside the workspace folders, and in the root itself: neither is A's.
    for path in (tmp_path / "elsewhere.db", tmp_path / "files" / "shared.db"):
        message = await refusal(a.client, "sqlite", {"path": database(path)})
        assert f"may only use files under its workspace folder {a.folder}/" in message

    sneaky = await a.client.create_connection(
        "sneaky", "file", {"url": str(a.folder / ".." / ".." / "server"), "format": "jsonl"}
    )
    assert "may only use files under" in (await a.client.test_connection(sneaky.id)).message

    # A run that would write outside the folder fails at once, not after retries.
    done = await run(a.client, relative.id, sneaky.id)
    assert done.state == JobState.FAILED
    assert "may only use files under" in done.error_message


async def test_workspace_b_can_neither_read_nor_write_workspace_a_files(
    two: tuple[Workspace, Workspace],
) -> None:
    a, b = two
    crm = Path(database(a.folder / "crm.db"))
    write(a.folder / "exports" / "users.csv", USERS)
    a_id = a.folder.name

    for path in (str(crm), f"../{a_id}/crm.db", str(b.folder / ".." / a_id / "crm.db")):
        message = await refusal(b.client, "sqlite", {"path": path})
        assert f"may only use files under its workspace folder {b.folder}/" in message
    for url in (str(a.folder / "exports"), f"../{a_id}/exports/users.csv"):
        await refusal(b.client, "file", {"url": url, "format": "csv"})

    # B's run into a SQLite destination that is A's file creates nothing there.
    write(b.folder / "in" / "users.csv", USERS)
    b_source = await b.client.create_connection(
        "b-in", "file", {"url": str(b.folder / "in"), "format": "csv"}
    )
    into_a = await b.client.create_connection(
        "into-a", "sqlite", {"path": f"../{a_id}/crm.db", "create": True}
    )
    done = await run(b.client, b_source.id, into_a.id)
    assert done.state == JobState.FAILED
    assert f"may only use files under its workspace folder {b.folder}/" in done.error_message
    assert tables(crm) == ["t"]

    # A still reads and writes its own files, by relative path.
    a_source = await a.client.create_connection("a-in", "file", {"url": "exports", "format": "csv"})
    preview = await a.client.preview_stream(a_source.id, "users")
    assert [dict(r) for r in preview.rows] == [{"id": 1, "name": "ada"}, {"id": 2, "name": "alan"}]
    a_dest = await a.client.create_connection("a-out", "sqlite", {"path": "crm.db"})
    done = await run(a.client, a_source.id, a_dest.id)
    assert done.state == JobState.SUCCEEDED, done.error_message
    assert sorted(tables(crm)) == ["_setu_loads", "t", "users"]  # with the load's marker


async def test_a_link_in_a_folder_lends_no_file_from_outside_the_workspace(
    two: tuple[Workspace, Workspace], tmp_path: Path
) -> None:
    a, b = two
    theirs = write(a.folder / "users.csv", "id,secret\n1,a-only\n")
    server_file = write(tmp_path / "server-only.csv", "id,secret\n1,server-only\n")
    mine = write(b.folder / "mine.csv", USERS)
    for name, target in (("theirs", theirs), ("server", server_file), ("alias", mine)):
        folder = b.folder / name
        folder.mkdir()
        (folder / "data.csv").symlink_to(target)

    for name in ("theirs", "server"):
        conn = await b.client.create_connection(
            name, "file", {"url": str(b.folder / name), "format": "csv"}
        )
        with pytest.raises(Aborted, match="leads outside the workspace folder") as refused:
            await b.client.preview_stream(conn.id, "data")
        assert "a-only" not in str(refused.value) and "server-only" not in str(refused.value)
        # Named directly, the link is resolved by the policy and refused too.
        await refusal(b.client, "file", {"url": str(b.folder / name / "data.csv")})

    # A link that stays inside the workspace folder is followed.
    alias = await b.client.create_connection(
        "alias", "file", {"url": str(b.folder / "alias"), "format": "csv"}
    )
    preview = await b.client.preview_stream(alias.id, "data")
    assert [dict(r) for r in preview.rows] == [{"id": 1, "name": "ada"}, {"id": 2, "name": "alan"}]


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
    database_url: str, pg_server_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    owner, other = await make_tenant(pool), await make_tenant(pool)
    secrets = tmp_path / "secrets.json"
    secrets.write_text(
        json.dumps({"workspaces": {str(owner.workspace_id): {"PG_USER": "postgres"}}})
    )
    config = postgres_config(pg_server_url) | {"user": {"$secret": "PG_USER"}}
    async with in_process(database_url, secrets_file=str(secrets)) as server:
        answers = []
        for tenant in (owner, other):
            async with SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client:
                conn = await client.create_connection("db", "postgres", config)
                answers.append(await client.test_connection(conn.id))

    assert answers[0].ok, answers[0].message
    assert not answers[1].ok
    assert "secret 'PG_USER' is not in this workspace's cloud secrets" in answers[1].message
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
    # At the embedded database's port, loopback is its address.
    assert "config.host: resolves to the address of Setu's own database" in refused.message
    other = await client.create_connection(
        "other", "postgres", {"host": "127.0.0.1", "port": 5433, "database": "d", "user": "u"}
    )
    refused = await client.test_connection(other.id)
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


async def test_a_one_person_servers_cloud_takes_a_relative_path_from_the_workspace_folder(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    # One rule under either reach: `path: rel.db` is the workspace folder's
    # rel.db, never a file in the folder the server started in.
    tenant: Tenant = await make_tenant(pool)
    root = tmp_path / "files"
    database(root / str(tenant.workspace_id) / "rel.db")
    async with (
        in_process(database_url, local_files_root=str(root), cloud_reach="local") as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        relative = await client.create_connection("relative", "sqlite", {"path": "rel.db"})
        tested = await client.test_connection(relative.id)
        assert tested.ok, tested.message
        streams = await client.discover_streams(relative.id)
    assert [s.name for s in streams.streams] == ["t"]
