"""File sources incremental by object, through the real server, SDK, cloud
worker, agent and providers (cloud → cloud, agent → cloud): over a local folder and over S3
(moto), a later run reads only the files that are new or changed since the
last run that loaded them; a reset reads every file again."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import asyncpg
import pytest

from setu_agent.engine.s3 import s3_client
from setu_client import InvalidArgument, SetuClient
from setu_client._proto.setu.v1 import common_pb2
from tests.databases import postgres_config, scratch_database
from tests.e2e.test_edge_runs import Edge, edge  # noqa: F401 (a fixture)
from tests.e2e.test_incremental import Cli
from tests.s3server import S3Endpoint

S = common_pb2
INCREMENTAL = {"sync": {"*": {"mode": "incremental"}}}


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"S3_SECRET": "testing"}))
    return {
        "data_dir": tmp_path / "server",
        "secrets_file": str(secrets),
        "shared_secrets": "S3_SECRET",
        "task_retry_backoff_seconds": 0.05,
    }


class Folder(Protocol):
    config: dict[str, Any]

    async def put(self, name: str, rows: list[tuple[int, str]]) -> None: ...


def csv_of(rows: list[tuple[int, str]]) -> bytes:
    return ("id,name\n" + "".join(f"{i},{n}\n" for i, n in rows)).encode()


class LocalFolder:
    def __init__(self, path: Path) -> None:
        path.mkdir()
        self.path = path
        self.config: dict[str, Any] = {"url": str(path), "format": "csv"}
        self._writes = 0

    async def put(self, name: str, rows: list[tuple[int, str]]) -> None:
        target = self.path / f"{name}.csv"
        target.write_bytes(csv_of(rows))
        # Each write gets its own modification time, however coarse the clock.
        self._writes += 1
        stamp = 1_700_000_000 + self._writes
        os.utime(target, (stamp, stamp))


class S3Folder:
    def __init__(self, endpoint: S3Endpoint, bucket: str) -> None:
        self.endpoint, self.bucket = endpoint, bucket
        self.config: dict[str, Any] = {
            "url": f"s3://{bucket}/lake/",
            "format": "csv",
            "endpoint_url": endpoint.endpoint_url,
            "region": endpoint.region,
            "access_key_id": endpoint.access_key_id,
            "secret_access_key": {"$secret": "S3_SECRET"},
        }

    async def put(self, name: str, rows: list[tuple[int, str]]) -> None:
        async with s3_client(self.endpoint.settings) as s3:
            await s3.put_object(Bucket=self.bucket, Key=f"lake/{name}.csv", Body=csv_of(rows))


@asynccontextmanager
async def folder(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if kind == "local":
        yield LocalFolder(tmp_path / "lake")
        return
    endpoint: S3Endpoint = request.getfixturevalue("s3_endpoint")
    yield S3Folder(endpoint, await endpoint.make_bucket())


async def run(client: SetuClient, pipeline_id: str) -> dict[str, int]:
    """Runs the pipeline; returns the rows it read, by stream."""
    job = await client.submit_run(pipeline_id)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    assert done.state == S.JOB_STATE_SUCCEEDED, done.error_message
    outputs = await client.job_outputs(job.id)
    return {o.stream: o.rows_extracted for o in outputs.streams}


async def tables(url: str, *names: str) -> dict[str, list[tuple[int, str]]]:
    conn = await asyncpg.connect(url)
    try:
        return {
            name: [
                (r[0], r[1]) for r in await conn.fetch(f"SELECT id, name FROM {name} ORDER BY id")
            ]
            for name in names
        }
    finally:
        await conn.close()


A = [(1, "a1"), (2, "a2"), (3, "a3")]
B = [(1, "b1"), (2, "b2")]
C = [(1, "c1"), (2, "c2"), (3, "c3"), (4, "c4")]


@pytest.mark.parametrize("kind", ["local", "s3"])
async def test_a_later_run_reads_only_new_or_changed_files(
    client: SetuClient,
    pg_server_url: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    kind: str,
    server: Any,
    tenant: Any,
) -> None:
    async with folder(kind, tmp_path, request) as lake, scratch_database(pg_server_url) as url:
        await lake.put("a", A)
        await lake.put("b", B)
        name = uuid.uuid4().hex[:8]
        src = await client.create_connection(f"lake-{name}", "file", lake.config)
        dst = await client.create_connection(f"wh-{name}", "postgres", postgres_config(url))
        made = await client.create_pipeline(
            f"p-{name}", src.id, dst.id, spec=INCREMENTAL, write_mode="overwrite"
        )

        assert await run(client, made.id) == {"a": 3, "b": 2}
        state = await client.get_pipeline_state(made.id)
        assert {s.stream: (s.cursor.type, s.rows) for s in state.streams} == {
            "a": ("files", 3),
            "b": ("files", 2),
        }
        shown = await Cli(f"127.0.0.1:{server.port}", tenant.api_key)(
            "pipelines", "state", made.name
        )
        assert "1 file, last modified 20" in shown

        # A new file: only it is read; a and b are not even loaded again. A
        # dry run before that leaves the state: the real run still reads c.
        await lake.put("c", C)
        dry = await client.submit_run(made.id, dry_run=True)
        await client.wait_for_job(dry.id)
        assert (await client.get_job(dry.id)).state == S.JOB_STATE_SUCCEEDED
        assert {s.stream for s in (await client.get_pipeline_state(made.id)).streams} == {"a", "b"}
        assert await run(client, made.id) == {"c": 4}
        # Nothing new: nothing is read.
        assert await run(client, made.id) == {}

        # A changed file is read again, whole (overwrite replaces its table).
        b2 = [*B, (3, "b3")]
        await lake.put("b", b2)
        assert await run(client, made.id) == {"b": 3}
        assert await tables(url, "a", "b", "c") == {"a": A, "b": b2, "c": C}

        # A reset of one stream reads that file again; all, every file.
        assert await client.reset_pipeline_state(made.id, "a") == ["a"]
        assert await run(client, made.id) == {"a": 3}
        await client.reset_pipeline_state(made.id)
        assert await run(client, made.id) == {"a": 3, "b": 3, "c": 4}
        assert await tables(url, "a", "b", "c") == {"a": A, "b": b2, "c": C}


async def test_a_cursor_on_a_file_stream_is_refused_naming_the_key(
    client: SetuClient, pg_server_url: str, tmp_path: Path
) -> None:
    lake = LocalFolder(tmp_path / "lake")
    await lake.put("a", A)
    async with scratch_database(pg_server_url) as url:
        src = await client.create_connection("lake", "file", lake.config)
        dst = await client.create_connection("wh", "postgres", postgres_config(url))
        spec = {"sync": {"a": {"mode": "incremental", "cursor": "id"}}}
        made = await client.create_pipeline("p", src.id, dst.id, spec=spec)
        job = await client.submit_run(made.id)
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
    assert done.state == S.JOB_STATE_FAILED
    assert "spec.sync.a.cursor: a file stream is incremental by object" in done.error_message


async def test_an_agent_folder_to_the_cloud_reads_only_new_or_changed_files(
    edge: Edge,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    """agent → cloud: the extract lists the folder on the agent; the mark
    travels in the staged manifest and the state advances with the cloud's
    load."""
    client = edge.client
    lake = LocalFolder(tmp_path / "edge-lake")
    await lake.put("a", A)
    async with edge.agent("a", edge.tenant.agent_token):
        src = await client.create_connection(
            "edge-lake", "file", lake.config, "agent", str(edge.tenant.agent_id)
        )
        dst = await client.create_connection("wh", "postgres", postgres_config(edge.destination))
        made = await client.create_pipeline(
            "lake-to-wh", src.id, dst.id, spec=INCREMENTAL, write_mode="overwrite"
        )
        assert await run(client, made.id) == {"a": 3}
        await lake.put("c", C)
        assert await run(client, made.id) == {"c": 4}
        assert await run(client, made.id) == {}
        b2 = [*A, (4, "a4")]
        await lake.put("a", b2)
        assert await run(client, made.id) == {"a": 4}
        assert await tables(edge.destination, "a", "c") == {"a": b2, "c": C}
        state = {s.stream: s.rows for s in (await client.get_pipeline_state(made.id)).streams}
        assert state == {"a": 4, "c": 4}


async def test_a_table_stream_without_a_cursor_is_refused_at_create(
    client: SetuClient, pg_server_url: str
) -> None:
    async with scratch_database(pg_server_url) as url:
        src = await client.create_connection("db", "postgres", postgres_config(url))
        dst = await client.create_connection("wh", "postgres", postgres_config(url))
        with pytest.raises(InvalidArgument, match=r"spec\.sync\.orders\.cursor: required for"):
            await client.create_pipeline(
                "p", src.id, dst.id, spec={"sync": {"orders": {"mode": "incremental"}}}
            )
