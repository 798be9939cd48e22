"""File sources incremental by object, through the real server, SDK, cloud
worker, agents and providers, in all four flows: over a local folder and over S3
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

from setu_client import InvalidArgument, SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_engine.staged.s3 import s3_client
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


async def run_saying(client: SetuClient, pipeline_id: str) -> tuple[dict[str, int], list[str]]:
    """Runs the pipeline; returns the rows it read by stream, and its timeline."""
    job = await client.submit_run(pipeline_id)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    assert done.state == S.JOB_STATE_SUCCEEDED, done.error_message
    outputs = await client.job_outputs(job.id)
    said = [e.message async for e in client.job_events(job.id)]
    return {o.stream: o.rows_extracted for o in outputs.streams}, said


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


async def test_a_cursor_on_a_file_stream_is_refused_at_create_and_update_naming_the_stream(
    client: SetuClient, pg_server_url: str, tmp_path: Path
) -> None:
    lake = LocalFolder(tmp_path / "lake")
    await lake.put("a", A)
    refused = r"spec\.sync\.a\.cursor: a file stream is incremental by object .*remove the cursor"
    async with scratch_database(pg_server_url) as url:
        src = await client.create_connection("lake", "file", lake.config)
        dst = await client.create_connection("wh", "postgres", postgres_config(url))
        spec = {"sync": {"a": {"mode": "incremental", "cursor": "id"}}}
        # Never discovered: the source's provider alone decides.
        with pytest.raises(InvalidArgument, match=refused):
            await client.create_pipeline("p", src.id, dst.id, spec=spec)
        made = await client.create_pipeline("p", src.id, dst.id, spec=INCREMENTAL)
        with pytest.raises(InvalidArgument, match=refused):
            await client.update_pipeline(made.id, spec=spec)


async def test_a_cursor_meeting_a_source_that_became_a_file_one_fails_the_run(
    client: SetuClient, pg_server_url: str, tmp_path: Path
) -> None:
    """A pipeline made over a table source with a cursor, whose connection
    was then changed into a file one: the run refuses the cursor, naming it."""
    lake = LocalFolder(tmp_path / "lake")
    await lake.put("a", A)
    async with scratch_database(pg_server_url) as url:
        src = await client.create_connection("src", "postgres", postgres_config(url))
        dst = await client.create_connection("wh", "postgres", postgres_config(url))
        spec = {"sync": {"a": {"mode": "incremental", "cursor": "id"}}}
        made = await client.create_pipeline("p", src.id, dst.id, spec=spec)
        await client.update_connection(src.id, provider="file", config=lake.config)
        job = await client.submit_run(made.id)
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
    assert done.state == S.JOB_STATE_FAILED
    assert "spec.sync.a.cursor: a file stream is incremental by object" in done.error_message


@pytest.fixture
def edge_with_s3_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Edge:
    """The edge fixture's server and agents, able to resolve S3_SECRET: the
    cloud worker from the server's secrets file (a shared secret), the
    agents from the same file (they inherit the environment)."""
    secrets = tmp_path / "edge-secrets.json"
    secrets.write_text(json.dumps({"S3_SECRET": "testing"}))
    monkeypatch.setenv("SETU_SECRETS_FILE", str(secrets))
    monkeypatch.setenv("SETU_SHARED_SECRETS", "S3_SECRET")
    made: Edge = request.getfixturevalue("edge")
    return made


# Each edge flow: (source on an agent, destination on an agent).
EDGE_FLOWS = {"a2c": (True, False), "c2a": (False, True), "a2a": (True, True)}


async def edge_lake(kind: str, path: Path, endpoint: S3Endpoint) -> Folder:
    if kind == "local":
        return LocalFolder(path)
    return S3Folder(endpoint, await endpoint.make_bucket())


async def flow_pipeline(rig: Edge, flow: str, lake: Folder) -> str:
    """The flow's pipeline: its source on agent A or in the cloud, its
    destination (schema `flow` of the destination database) on agent B or
    in the cloud."""
    client, (b_id, _) = rig.client, rig.agent_b
    source_on_agent, destination_on_agent = EDGE_FLOWS[flow]
    src = await client.create_connection(
        f"lake-{flow}",
        "file",
        lake.config,
        *(("agent", str(rig.tenant.agent_id)) if source_on_agent else ()),
    )
    if destination_on_agent:
        config = rig.edge_config(rig.destination) | {"schema": flow}
        dst = await client.create_connection(f"wh-{flow}", "postgres", config, "agent", str(b_id))
    else:
        config = postgres_config(rig.destination) | {"schema": flow}
        dst = await client.create_connection(f"wh-{flow}", "postgres", config)
    made = await client.create_pipeline(
        f"lake-{flow}", src.id, dst.id, spec=INCREMENTAL, write_mode="overwrite"
    )
    return made.id


@pytest.mark.parametrize("kind", ["local", "s3"])
async def test_every_edge_flow_reads_only_new_or_changed_files(
    edge_with_s3_secret: Edge, tmp_path: Path, kind: str
) -> None:
    """agent → cloud, cloud → agent and agent → agent: the folder is listed
    where the extract runs (agent A or the cloud worker), the objects' mark
    travels in the staged manifest and the load's result, and the state
    advances with the load wherever it commits (the cloud or agent B)."""
    rig = edge_with_s3_secret
    client, (_, b_token) = rig.client, rig.agent_b
    conn = await asyncpg.connect(rig.destination)
    await conn.execute("CREATE SCHEMA a2c; CREATE SCHEMA c2a; CREATE SCHEMA a2a")
    await conn.close()
    lakes = {flow: await edge_lake(kind, tmp_path / f"lake-{flow}", rig.s3) for flow in EDGE_FLOWS}
    async with rig.agent("a", rig.tenant.agent_token), rig.agent("b", b_token):
        made = {}
        for flow, lake in lakes.items():
            await lake.put("a", A)
            await lake.put("b", B)
            made[flow] = await flow_pipeline(rig, flow, lake)
        for flow, lake in lakes.items():
            assert await run(client, made[flow]) == {"a": 3, "b": 2}, flow
            await lake.put("c", C)
            assert await run(client, made[flow]) == {"c": 4}, flow
            read, said = await run_saying(client, made[flow])
            assert read == {}, flow
            if EDGE_FLOWS[flow][1]:  # no load dispatched to agent B: the run says why
                assert any("none had changed since the last run" in m for m in said), said
            b2 = [*B, (3, "b3")]
            await lake.put("b", b2)  # changed: read again, whole
            read, said = await run_saying(client, made[flow])
            assert read == {"b": 3}, flow
            # Wherever the folder was listed, the timeline says what was read, once.
            window = "stream b: incremental by object: 1 new or changed of 1 file"
            assert said.count(window) == 1, (flow, said)
            assert await tables(rig.destination, f"{flow}.a", f"{flow}.b", f"{flow}.c") == {
                f"{flow}.a": A,
                f"{flow}.b": b2,
                f"{flow}.c": C,
            }, flow
            state = await client.get_pipeline_state(made[flow])
            assert {s.stream: (s.cursor.type, s.rows) for s in state.streams} == {
                "a": ("files", 3),
                "b": ("files", 3),
                "c": ("files", 4),
            }, flow


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
