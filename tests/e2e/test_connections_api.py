"""ConnectionService CRUD through the SDK against a real in-process server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import field_mask_pb2, json_format, struct_pb2

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2, connections_pb2, connections_pb2_grpc
from setu_client.channel import open_channel
from setu_client.clock import FakeClock
from setu_client.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    from_rpc_error,
)
from setu_server.server import Running
from tests.factories import Tenant, make_connection, make_pipeline

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SQLITE = {"path": "/data/app.db"}
POSTGRES = {
    "host": "db.internal",
    "port": 5432,
    "database": "app",
    "user": "loader",
    "password": {"$secret": "PG_PASSWORD"},
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def stub(
    server: Running, tenant: Tenant
) -> AsyncIterator[connections_pb2_grpc.ConnectionServiceAsyncStub]:
    """The raw service, for what the SDK does not expose (page tokens, masks)."""
    async with open_channel(f"127.0.0.1:{server.port}", tenant.api_key) as channel:
        yield connections_pb2_grpc.ConnectionServiceStub(channel)


async def test_create_then_get_returns_the_connection_as_stored(
    client: SetuClient, tenant: Tenant
) -> None:
    made = await client.create_connection("warehouse", "sqlite", SQLITE)
    assert made.name == "warehouse" and made.provider == "sqlite"
    assert made.workspace_id == str(tenant.workspace_id)
    assert made.placement == common_pb2.PLACEMENT_CLOUD and made.agent_id == ""
    assert dict(made.config) == SQLITE
    assert made.created_at.ToDatetime(UTC) == START == made.updated_at.ToDatetime(UTC)
    assert await client.get_connection(made.id) == made


async def test_secret_references_are_stored_and_returned_unresolved(
    client: SetuClient, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PG_PASSWORD", "hunter2")  # resolvable, yet never resolved
    made = await client.create_connection("source", "postgres", POSTGRES)
    fetched = await client.get_connection(made.id)
    for answer in (made, fetched):
        config = _plain(answer.config)
        assert config["password"] == {"$secret": "PG_PASSWORD"}
        assert "hunter2" not in str(answer)
    stored = await pool.fetchval("SELECT config FROM connection WHERE id = $1", uuid.UUID(made.id))
    assert stored == POSTGRES, "whole numbers are stored as numbers, references as references"


async def test_a_plain_credential_is_refused(client: SetuClient) -> None:
    config = POSTGRES | {"password": "hunter2"}
    with pytest.raises(InvalidArgument, match=r"config\.password: must be a secret reference"):
        await client.create_connection("source", "postgres", config)


async def test_an_unknown_provider_or_config_field_is_invalid_argument(
    client: SetuClient,
) -> None:
    with pytest.raises(InvalidArgument, match="unknown provider 'oracle'"):
        await client.create_connection("c", "oracle", {})
    with pytest.raises(InvalidArgument, match=r"config: unknown key.*colour"):
        await client.create_connection("c", "sqlite", SQLITE | {"colour": "blue"})
    with pytest.raises(InvalidArgument, match=r"config\.path"):
        await client.create_connection("c", "sqlite", {})


async def test_an_agent_placed_connection_names_an_agent_of_the_workspace(
    client: SetuClient, tenant: Tenant, other: Tenant
) -> None:
    made = await client.create_connection("edge", "sqlite", SQLITE, "agent", str(tenant.agent_id))
    assert made.placement == common_pb2.PLACEMENT_AGENT
    assert made.agent_id == str(tenant.agent_id)
    with pytest.raises(InvalidArgument, match="agent_id: required when placement is AGENT"):
        await client.create_connection("e2", "sqlite", SQLITE, "agent")
    with pytest.raises(InvalidArgument, match="agent_id: only a connection placed AGENT"):
        await client.create_connection("e3", "sqlite", SQLITE, "cloud", str(tenant.agent_id))
    for stranger in (other.agent_id, uuid.uuid4()):
        with pytest.raises(NotFound, match=f"agent {stranger} not found"):
            await client.create_connection("e4", "sqlite", SQLITE, "agent", str(stranger))


async def test_unspecified_placement_means_cloud(
    stub: connections_pb2_grpc.ConnectionServiceAsyncStub,
) -> None:
    made = await stub.CreateConnection(
        connections_pb2.CreateConnectionRequest(name="c", provider="sqlite", config=_struct(SQLITE))
    )
    assert made.placement == common_pb2.PLACEMENT_CLOUD


async def test_a_name_is_unique_within_a_workspace_only(
    client: SetuClient, pool: asyncpg.Pool, other: Tenant
) -> None:
    await client.create_connection("warehouse", "sqlite", SQLITE)
    with pytest.raises(AlreadyExists, match="'warehouse' already exists"):
        await client.create_connection("warehouse", "sqlite", SQLITE)
    await make_connection(pool, other.workspace_id, name="warehouse")


async def test_another_workspaces_connection_is_not_found(
    client: SetuClient, pool: asyncpg.Pool, other: Tenant
) -> None:
    theirs = await make_connection(pool, other.workspace_id)
    calls = (
        lambda: client.get_connection(str(theirs.id)),
        lambda: client.update_connection(str(theirs.id), name="mine"),
        lambda: client.delete_connection(str(theirs.id)),
        lambda: client.get_connection(str(uuid.uuid4())),
    )
    for call in calls:
        with pytest.raises(NotFound, match=r"connection .* not found"):
            await call()
    assert [c.name async for c in client.list_connections()] == []
    still = await pool.fetchval("SELECT name FROM connection WHERE id = $1", theirs.id)
    assert still == theirs.name


async def test_list_pages_by_name_and_filters_by_provider(
    client: SetuClient,
    stub: connections_pb2_grpc.ConnectionServiceAsyncStub,
    pool: asyncpg.Pool,
    tenant: Tenant,
) -> None:
    names = ["e", "a", "d", "b", "c"]
    for name in names:
        await make_connection(pool, tenant.workspace_id, name=name)
    await make_connection(pool, tenant.workspace_id, name="pg", provider="postgres", config={})
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await stub.ListConnections(
            connections_pb2.ListConnectionsRequest(provider="sqlite", page_size=2, page_token=token)
        )
        seen += [c.name for c in page.connections]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == sorted(names) and pages == 3
    everything = [c.name async for c in client.list_connections(page_size=2)]
    assert everything == [*sorted(names), "pg"]
    only_pg = [c.name async for c in client.list_connections(provider="postgres")]
    assert only_pg == ["pg"]


async def test_list_defaults_to_pages_of_fifty(
    stub: connections_pb2_grpc.ConnectionServiceAsyncStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    for i in range(51):
        await make_connection(pool, tenant.workspace_id, name=f"c{i:02}")
    page = await stub.ListConnections(connections_pb2.ListConnectionsRequest())
    assert len(page.connections) == 50 and page.next_page_token
    rest = await stub.ListConnections(
        connections_pb2.ListConnectionsRequest(page_token=page.next_page_token)
    )
    assert [c.name for c in rest.connections] == ["c50"] and not rest.next_page_token


async def test_a_bad_or_foreign_page_token_is_invalid_argument(
    stub: connections_pb2_grpc.ConnectionServiceAsyncStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    for name in "abc":
        await make_connection(pool, tenant.workspace_id, name=name)
    first = await stub.ListConnections(connections_pb2.ListConnectionsRequest(page_size=1))
    with pytest.raises(InvalidArgument, match="page_token: issued for different filters"):
        await _call(
            stub.ListConnections(
                connections_pb2.ListConnectionsRequest(
                    page_size=1, page_token=first.next_page_token, provider="postgres"
                )
            )
        )
    with pytest.raises(InvalidArgument, match="page_token: not a token this server issued"):
        await _call(
            stub.ListConnections(connections_pb2.ListConnectionsRequest(page_token="garbage!"))
        )


async def test_update_replaces_only_the_masked_fields_and_bumps_updated_at(
    client: SetuClient, clock: FakeClock
) -> None:
    made = await client.create_connection("warehouse", "sqlite", SQLITE)
    clock.advance(60)
    renamed = await client.update_connection(made.id, name="lake")
    assert renamed.name == "lake" and dict(renamed.config) == SQLITE
    assert renamed.created_at == made.created_at
    assert renamed.updated_at.ToDatetime(UTC) == clock.now()
    moved = await client.update_connection(made.id, config={"path": "/data/other.db"})
    assert (moved.name, dict(moved.config)) == ("lake", {"path": "/data/other.db"})
    assert await client.get_connection(made.id) == moved


async def test_update_moves_a_connection_between_cloud_and_agent(
    client: SetuClient, tenant: Tenant, other: Tenant
) -> None:
    made = await client.create_connection("warehouse", "sqlite", SQLITE)
    with pytest.raises(InvalidArgument, match="agent_id: required when placement is AGENT"):
        await client.update_connection(made.id, placement="agent")
    with pytest.raises(NotFound, match=f"agent {other.agent_id} not found"):
        await client.update_connection(made.id, placement="agent", agent_id=str(other.agent_id))
    edge = await client.update_connection(made.id, placement="agent", agent_id=str(tenant.agent_id))
    assert (edge.placement, edge.agent_id) == (common_pb2.PLACEMENT_AGENT, str(tenant.agent_id))
    with pytest.raises(InvalidArgument, match="agent_id: only a connection placed AGENT"):
        await client.update_connection(made.id, placement="cloud")
    back = await client.update_connection(made.id, placement="cloud", agent_id=None)
    assert (back.placement, back.agent_id) == (common_pb2.PLACEMENT_CLOUD, "")


async def test_update_validates_the_resulting_connection_as_a_whole(client: SetuClient) -> None:
    made = await client.create_connection("warehouse", "sqlite", SQLITE)
    await client.create_connection("taken", "sqlite", SQLITE)
    with pytest.raises(InvalidArgument, match=r"config: unknown field.*path"):
        await client.update_connection(made.id, provider="postgres")
    with pytest.raises(InvalidArgument, match=r"config: unknown key.*colour"):
        await client.update_connection(made.id, config=SQLITE | {"colour": "red"})
    with pytest.raises(AlreadyExists, match="'taken' already exists"):
        await client.update_connection(made.id, name="taken")
    with pytest.raises(InvalidArgument, match="name: required"):
        await client.update_connection(made.id, name="  ")
    switched = await client.update_connection(made.id, provider="postgres", config=POSTGRES)
    assert switched.provider == "postgres"
    assert _plain(switched.config)["password"] == {"$secret": "PG_PASSWORD"}


async def test_update_with_an_empty_mask_replaces_every_mutable_field(
    stub: connections_pb2_grpc.ConnectionServiceAsyncStub, client: SetuClient
) -> None:
    made = await client.create_connection("warehouse", "sqlite", SQLITE)
    updated = await stub.UpdateConnection(
        connections_pb2.UpdateConnectionRequest(
            connection_id=made.id,
            connection=connections_pb2.Connection(
                name="source", provider="postgres", config=_struct(POSTGRES), id=str(uuid.uuid4())
            ),
        )
    )
    assert (updated.id, updated.name, updated.provider) == (made.id, "source", "postgres")
    assert updated.placement == common_pb2.PLACEMENT_CLOUD


async def test_an_unknown_mask_path_is_invalid_argument_naming_it(
    stub: connections_pb2_grpc.ConnectionServiceAsyncStub, client: SetuClient
) -> None:
    made = await client.create_connection("warehouse", "sqlite", SQLITE)
    for path in ("created_at", "workspace_id", "colour"):
        request = connections_pb2.UpdateConnectionRequest(
            connection_id=made.id,
            connection=connections_pb2.Connection(name="x"),
            update_mask=field_mask_pb2.FieldMask(paths=["name", path]),
        )
        with pytest.raises(InvalidArgument, match=f"update_mask: unknown field '{path}'"):
            await _call(stub.UpdateConnection(request))
    bad_agent = connections_pb2.UpdateConnectionRequest(
        connection_id=made.id,
        connection=connections_pb2.Connection(agent_id="not-a-uuid"),
        update_mask=field_mask_pb2.FieldMask(paths=["agent_id"]),
    )
    with pytest.raises(InvalidArgument, match=r"connection\.agent_id: must be a UUID"):
        await _call(stub.UpdateConnection(bad_agent))
    assert (await client.get_connection(made.id)).name == "warehouse"
    with pytest.raises(TypeError, match="cannot change colour"):
        await client.update_connection(made.id, colour="red")


async def test_delete_refuses_while_pipelines_use_the_connection(
    client: SetuClient, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    used = await make_connection(pool, tenant.workspace_id, name="used")
    first = await make_pipeline(pool, tenant.workspace_id, source=used, name="nightly")
    second = await make_pipeline(pool, tenant.workspace_id, destination=used, name="hourly")
    with pytest.raises(
        FailedPrecondition,
        match=f"connection {used.id} is used by pipeline\\(s\\) hourly, nightly; delete or "
        "change them first",
    ):
        await client.delete_connection(str(used.id))
    for pipeline in (first, second):
        await pool.execute("DELETE FROM pipeline WHERE id = $1", pipeline.id)
    await client.delete_connection(str(used.id))
    with pytest.raises(NotFound):
        await client.get_connection(str(used.id))


async def test_delete_takes_the_catalog_with_it(
    client: SetuClient, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    made = await make_connection(pool, tenant.workspace_id)
    await pool.execute(
        "INSERT INTO catalog_stream (connection_id, name, status, discovered_at) "
        "VALUES ($1, 'orders', 'active', now())",
        made.id,
    )
    await client.delete_connection(str(made.id))
    assert await pool.fetchval("SELECT count(*) FROM catalog_stream") == 0
    with pytest.raises(NotFound, match=f"connection {made.id} not found"):
        await client.delete_connection(str(made.id))


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(values)
    return message


def _plain(struct: struct_pb2.Struct) -> dict[str, Any]:
    found: dict[str, Any] = json_format.MessageToDict(struct)
    return found


async def _call(pending: object) -> object:
    """Await a raw stub call, raising the SDK's error class on failure."""
    try:
        return await pending  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        raise from_rpc_error(exc) from exc
