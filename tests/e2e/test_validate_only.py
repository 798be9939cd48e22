"""validate_only on Create/Update of connections and pipelines (AIP-163),
against a real in-process server: every bad input the project's tests
already send (test_connections_api.py, test_pipelines_api.py,
test_pipeline_catalog_checks.py, test_cli_apply.py), collected in one table
and sent twice, with validate_only and for real. Both answers must be the
same refusal with the same message, and the validate_only call must leave
the workspace exactly as it was."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client.errors import InvalidArgument, SetuError
from tests.factories import Tenant, make_connection
from tests.servers import in_process

SQLITE = {"path": "/tmp/setu-validate-only.db"}
SECRET_PG = {"host": "db.internal", "database": "app", "user": "u"}


@dataclass
class World:
    """What the cases refer to: the tenant's objects and another tenant's."""

    client: SetuClient
    tenant: Tenant
    other: Tenant
    source: str  # discovered: a sqlite file with customers and events
    destination: str
    theirs: str  # another workspace's connection
    pipeline: str
    tmp: Path


Case = Callable[[World, bool], Awaitable[object]]


def _conn(*args: Any, **kwargs: Any) -> Case:
    def call(w: World, validate_only: bool) -> Awaitable[object]:
        resolved = [a(w) if callable(a) else a for a in args]
        return w.client.create_connection(*resolved, validate_only=validate_only, **kwargs)

    return call


def _conn_update(**fields: Any) -> Case:
    def call(w: World, validate_only: bool) -> Awaitable[object]:
        values = {k: v(w) if callable(v) else v for k, v in fields.items()}
        return w.client.update_connection(w.destination, validate_only=validate_only, **values)

    return call


def _pipe(name: str = "p", **kwargs: Any) -> Case:
    def call(w: World, validate_only: bool) -> Awaitable[object]:
        values = {k: v(w) if callable(v) else v for k, v in kwargs.items()}
        source = values.pop("source", w.source)
        destination = values.pop("destination", w.destination)
        return w.client.create_pipeline(
            name, source, destination, validate_only=validate_only, **values
        )

    return call


def _pipe_update(pipeline: Callable[[World], str] | None = None, **fields: Any) -> Case:
    def call(w: World, validate_only: bool) -> Awaitable[object]:
        values = {k: v(w) if callable(v) else v for k, v in fields.items()}
        target = pipeline(w) if pipeline else w.pipeline
        return w.client.update_pipeline(target, validate_only=validate_only, **values)

    return call


def _agent(w: World) -> str:
    return str(w.tenant.agent_id)


def _their_agent(w: World) -> str:
    return str(w.other.agent_id)


def _theirs(w: World) -> str:
    return w.theirs


_NOBODY = str(uuid.uuid4())

CORPUS: dict[str, Case] = {
    # connections: create
    "plain credential": _conn("c", "postgres", SECRET_PG | {"password": "hunter2"}),
    "unknown provider": _conn("c", "oracle", {}),
    "provider postgresql": _conn("c", "postgresql", SECRET_PG),
    "unknown config key": _conn("c", "sqlite", SQLITE | {"colour": "blue"}),
    "config hosts": _conn("c", "sqlite", SQLITE | {"hosts": "x"}),
    "config without path": _conn("c", "sqlite", {}),
    "agent placement, no agent": _conn("c", "sqlite", SQLITE, "agent"),
    "cloud placement naming an agent": _conn("c", "sqlite", SQLITE, "cloud", _agent),
    "another workspace's agent": _conn("c", "sqlite", SQLITE, "agent", _their_agent),
    "no such agent": _conn("c", "sqlite", SQLITE, "agent", _NOBODY),
    "agent not a UUID": _conn("c", "sqlite", SQLITE, "agent", "edge-1"),
    "connection name taken": _conn("destination", "sqlite", SQLITE),
    "connection name blank": _conn("", "sqlite", SQLITE),
    # connections: update
    "update to agent, no agent": _conn_update(placement="agent"),
    "update config unknown key": _conn_update(config=SQLITE | {"colour": "blue"}),
    "update config without path": _conn_update(config={}),
    "update name taken": _conn_update(name="source"),
    "update name blank": _conn_update(name=" "),
    "update to another workspace's agent": _conn_update(placement="agent", agent_id=_their_agent),
    # pipelines: create
    "another workspace's source": _pipe(source=_theirs),
    "no such destination": _pipe(destination=_NOBODY),
    "no source": _pipe(source=""),
    "unknown operator": _pipe(spec={"operators": [{"op": "teleport"}]}),
    "empty stream": _pipe(streams=["customers", ""]),
    "stream twice": _pipe(streams=["customers", "events", "customers"]),
    "six-field schedule": _pipe(schedule="* * * * * *"),
    "@daily": _pipe(schedule="@daily"),
    "minute 61": _pipe(schedule="61 * * * *"),
    "30 February, paused": _pipe(schedule="0 0 30 2 *", paused=True),
    "pipeline name taken": _pipe("nightly"),
    "stream the catalog lacks": _pipe(streams=["custmers"]),
    "upsert without a key": _pipe(streams=["events"], write_mode="upsert"),
    "unknown key column": _pipe(streams=["customers"], spec={"primary_key": {"customers": ["x"]}}),
    "unknown rename column": _pipe(
        streams=["customers"],
        spec={"operators": [{"op": "rename", "columns": {"nmae": "full_name"}}]},
    ),
    # pipelines: update
    "update pipeline name taken": _pipe_update(name="other"),
    "update streams twice": _pipe_update(streams=["customers", "customers"]),
    "update bad schedule": _pipe_update(schedule="0 * * *"),
    "update to another workspace's source": _pipe_update(source_connection_id=_theirs),
    "update stream the catalog lacks": _pipe_update(streams=["custmers"]),
    "update a pipeline of no one": _pipe_update(lambda w: _NOBODY, paused=True),
}


@pytest.fixture
async def world(
    database_url: str, pool: asyncpg.Pool, tenant: Tenant, other: Tenant, tmp_path: Path
) -> AsyncIterator[World]:
    with sqlite3.connect(tmp_path / "crm.db") as db:
        db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("CREATE TABLE events (at TEXT, what TEXT)")  # no primary key
    async with (
        in_process(database_url, data_dir=tmp_path / "server") as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        source = await client.create_connection(
            "source", "sqlite", {"path": str(tmp_path / "crm.db")}
        )
        destination = await client.create_connection(
            "destination", "sqlite", {"path": str(tmp_path / "dw.db"), "create": True}
        )
        await client.discover_streams(source.id)
        theirs = await make_connection(pool, other.workspace_id)
        nightly = await client.create_pipeline("nightly", source.id, destination.id)
        await client.create_pipeline("other", source.id, destination.id)
        yield World(
            client, tenant, other, source.id, destination.id, str(theirs.id), nightly.id, tmp_path
        )


async def snapshot(pool: asyncpg.Pool) -> list[Any]:
    """Every connection and pipeline row, whole."""
    rows = await pool.fetch("SELECT to_jsonb(c) AS r FROM connection c ORDER BY id")
    rows += await pool.fetch("SELECT to_jsonb(p) AS r FROM pipeline p ORDER BY id")
    return [r["r"] for r in rows]


async def verdict(call: Awaitable[object]) -> tuple[str, str]:
    try:
        await call
    except SetuError as exc:
        return type(exc).__name__, exc.message
    return "accepted", ""


async def test_validate_only_and_the_real_call_refuse_the_same_inputs_the_same_way(
    world: World, pool: asyncpg.Pool
) -> None:
    mismatches: list[str] = []
    for name, case in CORPUS.items():
        before = await snapshot(pool)
        planned = await verdict(case(world, True))
        if await snapshot(pool) != before:
            mismatches.append(f"{name}: validate_only wrote something")
        applied = await verdict(case(world, False))
        if planned[0] == "accepted" or planned != applied:
            mismatches.append(f"{name}: validate_only {planned} but the call {applied}")
        assert await snapshot(pool) == before, f"{name}: the real call wrote despite refusing"
    assert mismatches == []


async def test_validate_only_answers_what_it_would_write_and_writes_nothing(
    world: World, pool: asyncpg.Pool
) -> None:
    before = await snapshot(pool)
    c = world.client
    config = {"path": str(world.tmp / "new.db"), "create": True}
    would = await c.create_connection("new", "sqlite", config, validate_only=True)
    changed = await c.update_connection(world.destination, name="dw", validate_only=True)
    pipeline = await c.create_pipeline(
        "hourly", world.source, world.destination, schedule="0 * * * *", validate_only=True
    )
    paused = await c.update_pipeline(world.pipeline, paused=True, validate_only=True)
    assert await snapshot(pool) == before

    assert (would.name, would.provider, would.id != "") == ("new", "sqlite", True)
    assert changed.name == "dw" and changed.id == world.destination
    assert pipeline.name == "hourly" and pipeline.HasField("next_run_at")
    assert paused.paused and paused.id == world.pipeline
    made = await c.create_connection("new", "sqlite", config)
    assert (made.name, made.config) == (would.name, would.config)


async def test_a_pipeline_is_judged_against_a_connection_not_made_yet(
    world: World, pool: asyncpg.Pool
) -> None:
    """An apply that creates a connection and its pipeline validates the
    pipeline before the connection exists: the stand-in is made in the same
    rolled-back transaction, and nothing stays."""
    c = world.client
    before = await snapshot(pool)
    new = {"name": "lake", "provider": "sqlite", "config": {"path": "/tmp/lake.db"}}
    accepted = await c.create_pipeline(
        "to-lake", world.source, "", validate_only=True, new_destination=new
    )
    assert accepted.destination_connection_id not in ("", world.destination)
    # The same stand-in as both ends is made once.
    both = await c.create_pipeline(
        "lake-to-lake", "", "", validate_only=True, new_source=new, new_destination=new
    )
    assert both.source_connection_id == both.destination_connection_id
    with pytest.raises(InvalidArgument, match="unknown operator") as refused:
        await c.create_pipeline(
            "to-lake",
            world.source,
            "",
            spec={"operators": [{"op": "teleport"}]},
            validate_only=True,
            new_destination=new,
        )
    assert "teleport" in refused.value.message
    # A stand-in is checked as CreateConnection checks it, its refusal named
    # by the request's field for it.
    with pytest.raises(InvalidArgument, match="colour") as refused:
        await c.create_pipeline(
            "to-lake",
            world.source,
            "",
            validate_only=True,
            new_destination=new | {"config": {"path": "/tmp/x.db", "colour": "blue"}},
        )
    assert refused.value.message.startswith("new_destination_connection.config: "), refused
    # Two different stand-ins of one name are not one connection.
    other = new | {"config": {"path": "/tmp/other.db"}}
    with pytest.raises(InvalidArgument, match="one name is one connection") as refused:
        await c.create_pipeline(
            "lake-to-lake", "", "", validate_only=True, new_source=new, new_destination=other
        )
    assert refused.value.message.startswith("new_source_connection.name: 'lake'"), refused
    moved = await c.update_pipeline(
        world.pipeline, validate_only=True, new_source=new, source_connection_id=""
    )
    assert moved.source_connection_id not in ("", world.source)
    assert await snapshot(pool) == before
    # Only a validate_only call may name a stand-in.
    with pytest.raises(
        InvalidArgument, match="new_destination_connection: only with validate_only"
    ):
        await c.create_pipeline("to-lake", world.source, "", new_destination=new)
    assert await snapshot(pool) == before
