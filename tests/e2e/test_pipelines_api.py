"""PipelineService CRUD through the SDK against a real in-process server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import field_mask_pb2, json_format

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2, pipelines_pb2, pipelines_pb2_grpc
from setu_client.channel import open_channel
from setu_client.clock import FakeClock
from setu_client.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    from_rpc_error,
)
from setu_engine.errors import SpecError
from setu_engine.operators.chain import parse_spec
from setu_server.models import Connection, JobKind, JobState
from setu_server.server import Running
from setu_server.store import jobs
from tests.factories import Tenant, make_connection, make_pipeline

START = datetime(2026, 3, 1, 12, 7, tzinfo=UTC)
SPEC: dict[str, Any] = {
    "operators": [
        {"op": "rename", "columns": {"id": "order_id"}},
        {"op": "drop", "columns": ["secret"]},
    ]
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def stub(
    server: Running, tenant: Tenant
) -> AsyncIterator[pipelines_pb2_grpc.PipelineServiceAsyncStub]:
    """The raw service, for what the SDK does not expose (page tokens, masks)."""
    async with open_channel(f"127.0.0.1:{server.port}", tenant.api_key) as channel:
        yield pipelines_pb2_grpc.PipelineServiceStub(channel)


@pytest.fixture
async def source(pool: asyncpg.Pool, tenant: Tenant) -> Connection:
    return await make_connection(pool, tenant.workspace_id, name="source")


@pytest.fixture
async def destination(pool: asyncpg.Pool, tenant: Tenant) -> Connection:
    return await make_connection(pool, tenant.workspace_id, name="destination")


async def _create(
    client: SetuClient,
    source: Connection,
    destination: Connection,
    name: str = "nightly",
    **kw: Any,
) -> pipelines_pb2.Pipeline:
    return await client.create_pipeline(name, str(source.id), str(destination.id), **kw)


async def test_create_then_get_returns_the_pipeline_as_stored(
    client: SetuClient, tenant: Tenant, source: Connection, destination: Connection
) -> None:
    made = await _create(
        client,
        source,
        destination,
        streams=["orders", "public.customers"],
        spec=SPEC,
        write_mode="upsert",
        schedule="*/15 * * * *",
    )
    assert made.workspace_id == str(tenant.workspace_id) and made.name == "nightly"
    assert (made.source_connection_id, made.destination_connection_id) == (
        str(source.id),
        str(destination.id),
    )
    assert list(made.streams) == ["orders", "public.customers"]
    assert json_format.MessageToDict(made.spec) == SPEC
    assert made.write_mode == common_pb2.WRITE_MODE_UPSERT
    assert (made.schedule, made.paused) == ("*/15 * * * *", False)
    assert made.next_run_at.ToDatetime(UTC) == datetime(2026, 3, 1, 12, 15, tzinfo=UTC)
    assert made.created_at.ToDatetime(UTC) == START == made.updated_at.ToDatetime(UTC)
    assert await client.get_pipeline(made.id) == made


async def test_defaults_are_append_all_streams_and_manual_runs(
    stub: pipelines_pb2_grpc.PipelineServiceAsyncStub, source: Connection, destination: Connection
) -> None:
    made = await stub.CreatePipeline(
        pipelines_pb2.CreatePipelineRequest(
            name="p", source_connection_id=str(source.id), destination_connection_id=str(source.id)
        )
    )
    assert made.write_mode == common_pb2.WRITE_MODE_APPEND
    assert list(made.streams) == [] and made.schedule == ""
    assert not made.HasField("next_run_at")


async def test_both_connections_must_exist_in_the_workspace(
    client: SetuClient, pool: asyncpg.Pool, other: Tenant, source: Connection
) -> None:
    theirs = await make_connection(pool, other.workspace_id)
    missing = uuid.uuid4()
    with pytest.raises(NotFound, match=f"source connection {theirs.id} not found"):
        await client.create_pipeline("p", str(theirs.id), str(source.id))
    with pytest.raises(NotFound, match=f"destination connection {missing} not found"):
        await client.create_pipeline("p", str(source.id), str(missing))


async def test_an_invalid_spec_is_invalid_argument_with_the_parsers_message(
    client: SetuClient, source: Connection, destination: Connection
) -> None:
    bad = {"operators": [{"op": "teleport"}]}
    with pytest.raises(SpecError) as expected:
        parse_spec(bad)
    with pytest.raises(InvalidArgument) as answered:
        await _create(client, source, destination, spec=bad)
    assert answered.value.message == str(expected.value)


async def test_streams_must_be_non_empty_and_distinct(
    client: SetuClient, source: Connection, destination: Connection
) -> None:
    with pytest.raises(InvalidArgument, match=r"streams\[1\]: must not be empty"):
        await _create(client, source, destination, streams=["orders", ""])
    with pytest.raises(InvalidArgument, match=r"streams\[2\]: 'orders' is listed twice"):
        await _create(client, source, destination, streams=["orders", "items", "orders"])


@pytest.mark.parametrize(
    ("schedule", "why"),
    [
        ("* * * * * *", "got 6 field"),
        ("0 * * *", "got 4 field"),
        ("@daily", "got 1 field"),
        ("61 * * * *", "is not valid"),
        ("a b c d e", "is not valid"),
        ("0 0 30 2 *", "is not valid"),
    ],
)
async def test_a_schedule_must_be_a_five_field_cron_expression_that_fires(
    client: SetuClient, source: Connection, destination: Connection, schedule: str, why: str
) -> None:
    with pytest.raises(InvalidArgument, match=f"^schedule: .*{why}"):
        await _create(client, source, destination, schedule=schedule)
    with pytest.raises(InvalidArgument, match=r"^schedule: "):
        await _create(client, source, destination, schedule=schedule, paused=True)


async def test_a_paused_pipeline_has_no_next_run(
    client: SetuClient, source: Connection, destination: Connection
) -> None:
    made = await _create(client, source, destination, schedule="0 3 * * *", paused=True)
    assert made.paused and not made.HasField("next_run_at")


async def test_a_name_is_unique_within_a_workspace_only(
    client: SetuClient,
    pool: asyncpg.Pool,
    other: Tenant,
    source: Connection,
    destination: Connection,
) -> None:
    await _create(client, source, destination)
    with pytest.raises(AlreadyExists, match="'nightly' already exists"):
        await _create(client, source, destination)
    await make_pipeline(pool, other.workspace_id, name="nightly")


async def test_another_workspaces_pipeline_is_not_found(
    client: SetuClient, pool: asyncpg.Pool, other: Tenant
) -> None:
    theirs = await make_pipeline(pool, other.workspace_id)
    calls = (
        lambda: client.get_pipeline(str(theirs.id)),
        lambda: client.update_pipeline(str(theirs.id), name="mine"),
        lambda: client.delete_pipeline(str(theirs.id)),
        lambda: client.get_pipeline(str(uuid.uuid4())),
    )
    for call in calls:
        with pytest.raises(NotFound, match=r"pipeline .* not found"):
            await call()
    assert [p.name async for p in client.list_pipelines()] == []
    still = await pool.fetchval("SELECT name FROM pipeline WHERE id = $1", theirs.id)
    assert still == theirs.name


async def test_list_pages_by_name(
    client: SetuClient,
    stub: pipelines_pb2_grpc.PipelineServiceAsyncStub,
    pool: asyncpg.Pool,
    tenant: Tenant,
    source: Connection,
) -> None:
    names = ["e", "a", "d", "b", "c"]
    for name in names:
        await make_pipeline(pool, tenant.workspace_id, name=name, source=source, destination=source)
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await stub.ListPipelines(
            pipelines_pb2.ListPipelinesRequest(page_size=2, page_token=token)
        )
        seen += [p.name for p in page.pipelines]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == sorted(names) and pages == 3
    assert [p.name async for p in client.list_pipelines(page_size=3)] == sorted(names)
    with pytest.raises(InvalidArgument, match="page_token: not a token this server issued"):
        await _call(stub.ListPipelines(pipelines_pb2.ListPipelinesRequest(page_token="x")))


async def test_list_defaults_to_pages_of_fifty(
    stub: pipelines_pb2_grpc.PipelineServiceAsyncStub,
    pool: asyncpg.Pool,
    tenant: Tenant,
    source: Connection,
) -> None:
    for i in range(51):
        await make_pipeline(
            pool, tenant.workspace_id, name=f"p{i:02}", source=source, destination=source
        )
    page = await stub.ListPipelines(pipelines_pb2.ListPipelinesRequest())
    assert len(page.pipelines) == 50 and page.next_page_token


async def test_update_replaces_only_the_masked_fields(
    client: SetuClient, clock: FakeClock, source: Connection, destination: Connection
) -> None:
    made = await _create(
        client, source, destination, streams=["orders"], schedule="0 * * * *", spec=SPEC
    )
    clock.advance(3600 * 5)
    changed = await client.update_pipeline(
        made.id, name="hourly", streams=["orders", "items"], write_mode="overwrite"
    )
    assert (changed.name, list(changed.streams)) == ("hourly", ["orders", "items"])
    assert changed.write_mode == common_pb2.WRITE_MODE_OVERWRITE
    assert changed.schedule == "0 * * * *"
    assert changed.next_run_at == made.next_run_at, "a tick is never moved by other edits"
    assert changed.created_at == made.created_at
    assert changed.updated_at.ToDatetime(UTC) == clock.now()
    swapped = await client.update_pipeline(
        made.id, source_connection_id=str(destination.id), destination_connection_id=str(source.id)
    )
    assert swapped.source_connection_id == str(destination.id)
    assert await client.get_pipeline(made.id) == swapped


async def test_changing_the_schedule_or_pause_recomputes_the_next_run(
    client: SetuClient, clock: FakeClock, source: Connection, destination: Connection
) -> None:
    made = await _create(client, source, destination, schedule="0 * * * *")
    assert made.next_run_at.ToDatetime(UTC) == datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
    clock.advance(3600 * 2)
    daily = await client.update_pipeline(made.id, schedule="30 6 * * *")
    assert daily.next_run_at.ToDatetime(UTC) == datetime(2026, 3, 2, 6, 30, tzinfo=UTC)
    paused = await client.update_pipeline(made.id, paused=True)
    assert paused.paused and not paused.HasField("next_run_at")
    clock.advance(86400)
    resumed = await client.update_pipeline(made.id, paused=False)
    assert resumed.next_run_at.ToDatetime(UTC) == datetime(2026, 3, 3, 6, 30, tzinfo=UTC)
    manual = await client.update_pipeline(made.id, schedule="")
    assert manual.schedule == "" and not manual.HasField("next_run_at")
    with pytest.raises(InvalidArgument, match=r"^schedule: "):
        await client.update_pipeline(made.id, schedule="*/5 * * * * *")


async def test_update_validates_the_resulting_pipeline_as_a_whole(
    client: SetuClient,
    pool: asyncpg.Pool,
    other: Tenant,
    source: Connection,
    destination: Connection,
) -> None:
    made = await _create(client, source, destination)
    await _create(client, source, destination, name="taken")
    theirs = await make_connection(pool, other.workspace_id)
    with pytest.raises(NotFound, match=f"destination connection {theirs.id} not found"):
        await client.update_pipeline(made.id, destination_connection_id=str(theirs.id))
    with pytest.raises(AlreadyExists, match="'taken' already exists"):
        await client.update_pipeline(made.id, name="taken")
    with pytest.raises(InvalidArgument, match="is listed twice"):
        await client.update_pipeline(made.id, streams=["a", "a"])
    with pytest.raises(InvalidArgument):
        await client.update_pipeline(made.id, spec={"operators": [{"op": "teleport"}]})
    with pytest.raises(InvalidArgument, match="source_connection_id: required"):
        await client.update_pipeline(made.id, source_connection_id="")
    assert await client.get_pipeline(made.id) == made


async def test_update_with_an_empty_mask_replaces_every_mutable_field(
    stub: pipelines_pb2_grpc.PipelineServiceAsyncStub,
    client: SetuClient,
    source: Connection,
    destination: Connection,
) -> None:
    made = await _create(client, source, destination, streams=["orders"], schedule="0 * * * *")
    replaced = await stub.UpdatePipeline(
        pipelines_pb2.UpdatePipelineRequest(
            pipeline_id=made.id,
            pipeline=pipelines_pb2.Pipeline(
                name="fresh",
                source_connection_id=str(destination.id),
                destination_connection_id=str(destination.id),
                id=str(uuid.uuid4()),
            ),
        )
    )
    assert (replaced.id, replaced.name) == (made.id, "fresh")
    assert list(replaced.streams) == [] and replaced.schedule == ""
    assert replaced.write_mode == common_pb2.WRITE_MODE_APPEND
    assert not replaced.HasField("next_run_at")
    with pytest.raises(InvalidArgument, match="source_connection_id: required"):
        await _call(
            stub.UpdatePipeline(
                pipelines_pb2.UpdatePipelineRequest(
                    pipeline_id=made.id, pipeline=pipelines_pb2.Pipeline(name="x")
                )
            )
        )


async def test_an_unknown_mask_path_is_invalid_argument_naming_it(
    stub: pipelines_pb2_grpc.PipelineServiceAsyncStub,
    client: SetuClient,
    source: Connection,
    destination: Connection,
) -> None:
    made = await _create(client, source, destination)
    for path in ("next_run_at", "id", "colour"):
        request = pipelines_pb2.UpdatePipelineRequest(
            pipeline_id=made.id,
            pipeline=pipelines_pb2.Pipeline(name="x"),
            update_mask=field_mask_pb2.FieldMask(paths=["name", path]),
        )
        with pytest.raises(InvalidArgument, match=f"update_mask: unknown field '{path}'"):
            await _call(stub.UpdatePipeline(request))
    bad_id = pipelines_pb2.UpdatePipelineRequest(
        pipeline_id=made.id,
        pipeline=pipelines_pb2.Pipeline(source_connection_id="nope"),
        update_mask=field_mask_pb2.FieldMask(paths=["source_connection_id"]),
    )
    with pytest.raises(InvalidArgument, match=r"pipeline\.source_connection_id: must be a UUID"):
        await _call(stub.UpdatePipeline(bad_id))
    with pytest.raises(TypeError, match="cannot change colour"):
        await client.update_pipeline(made.id, colour="red")


async def test_delete_refuses_while_a_run_is_pending_or_running(
    client: SetuClient, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    pipeline = await make_pipeline(pool, tenant.workspace_id)
    for state in (JobState.PENDING, JobState.RUNNING):
        run = await _run(pool, tenant, pipeline.id, state)
        with pytest.raises(
            FailedPrecondition,
            match=f"pipeline {pipeline.id} has an active run {run}; cancel it first",
        ):
            await client.delete_pipeline(str(pipeline.id))
        await pool.execute("UPDATE job SET state = 'cancelled' WHERE id = $1", run)
    await client.delete_pipeline(str(pipeline.id))
    with pytest.raises(NotFound, match=f"pipeline {pipeline.id} not found"):
        await client.get_pipeline(str(pipeline.id))
    kept = await pool.fetch(
        "SELECT pipeline_id FROM job WHERE workspace_id = $1", tenant.workspace_id
    )
    assert [r["pipeline_id"] for r in kept] == [None, None], "runs outlive their pipeline"


async def test_ended_and_waiting_runs_do_not_block_delete(
    client: SetuClient, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    pipeline = await make_pipeline(pool, tenant.workspace_id)
    for state in (JobState.READY, JobState.SUCCEEDED, JobState.FAILED):
        await _run(pool, tenant, pipeline.id, state)
    await client.delete_pipeline(str(pipeline.id))
    with pytest.raises(NotFound):
        await client.delete_pipeline(str(pipeline.id))


async def test_a_deleted_pipeline_frees_its_connections(
    client: SetuClient, source: Connection, destination: Connection
) -> None:
    made = await _create(client, source, destination)
    with pytest.raises(FailedPrecondition, match="used by pipeline\\(s\\) nightly"):
        await client.delete_connection(str(source.id))
    await client.delete_pipeline(made.id)
    await client.delete_connection(str(source.id))
    await client.delete_connection(str(destination.id))


async def _run(
    pool: asyncpg.Pool, tenant: Tenant, pipeline_id: uuid.UUID, state: JobState
) -> uuid.UUID:
    job = await jobs.insert_job(
        pool,
        id=uuid.uuid4(),
        workspace_id=tenant.workspace_id,
        kind=JobKind.RUN,
        state=state,
        pipeline_id=pipeline_id,
        now=None,
    )
    return job.id


async def _call(pending: object) -> object:
    """Await a raw stub call, raising the SDK's error class on failure."""
    try:
        return await pending  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        raise from_rpc_error(exc) from exc
