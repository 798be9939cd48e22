"""The cloud worker's connection cache (setu_agent/cloud/connections.py):
a run's connection serves the next run of the same connection, and never
anything else — not another workspace, not a changed config or secret, not
a host the egress policy would now refuse."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from setu_agent.cloud.connections import ConnectionCache
from setu_agent.cloud.migrate import Migrate, MigrateSettings
from setu_agent.cloud.policy import CloudPolicy
from setu_agent.runtime.task import TaskContext
from setu_engine.errors import ConfigError
from setu_engine.kinds import WriteMode
from setu_engine.providers.base import Connector
from setu_engine.staged.blob import BlobSettings
from setu_engine.support.egress import AddressPolicy
from setu_engine.support.secrets import SecretStore
from setu_tasks.specs import ConnectionSpec, LeasedTask, MigrateSpec
from tests.e2e.test_cloud_egress import tcp_front

LOOPBACK = AddressPolicy(allow=(ipaddress.ip_network("127.0.0.0/8"),))
WS_A, WS_B = str(uuid.uuid4()), str(uuid.uuid4())
CONNECTION = str(uuid.uuid4())


class Resolver:
    """An egress whose DNS answers the test sets, checked by the real policy:
    a host can start resolving somewhere else between two runs."""

    def __init__(self, answers: dict[str, str], policy: AddressPolicy = LOOPBACK) -> None:
        self.answers = answers
        self.policy = policy
        self.asked: list[str] = []

    async def address(self, host: str, port: int, field: str) -> str:
        self.asked.append(host)
        address = ipaddress.ip_address(self.answers[host])
        self.policy.check(address, port, field)
        return str(address)


@pytest.fixture
async def port(database_url: str) -> AsyncIterator[int]:
    async with tcp_front(database_url) as port:
        yield port


def config_of(database_url: str, port: int, **extra: Any) -> dict[str, Any]:
    database = urlsplit(database_url).path.lstrip("/")
    return {"host": "db.example", "port": port, "database": database, "user": "postgres"} | extra


async def backend(connector: Connector) -> int:
    pid: int = await connector._conn.fetchval("SELECT pg_backend_pid()")  # type: ignore[attr-defined]
    return pid


async def take(
    cache: ConnectionCache, workspace: str, config: dict[str, Any], egress: Any
) -> Connector:
    return await cache.take(workspace, CONNECTION, "postgres", config, egress, None)


async def test_the_next_run_of_a_connection_reuses_its_session_reset(
    database_url: str, port: int
) -> None:
    cache = ConnectionCache()
    config = config_of(database_url, port)
    egress = Resolver({"db.example": "127.0.0.1"})
    first = await take(cache, WS_A, config, egress)
    pid = await backend(first)
    await first._conn.execute("SET work_mem = '7MB'")  # type: ignore[attr-defined]
    await cache.give_back(first)
    assert cache.idle_count(WS_A) == 1
    second = await take(cache, WS_A, config, egress)
    assert cache.reused(second)
    assert await backend(second) == pid
    # Reset before reuse: the last run's session settings are gone.
    assert await second._conn.fetchval("SHOW work_mem") != "7MB"  # type: ignore[attr-defined]
    assert egress.asked == ["db.example", "db.example"]  # vetted again on reuse
    await cache.give_back(second)
    await cache.close()
    assert cache.idle_count() == 0
    assert second._conn.is_closed()  # type: ignore[attr-defined]


async def test_two_workspaces_never_share_a_cached_connection(database_url: str, port: int) -> None:
    cache = ConnectionCache()
    config = config_of(database_url, port)
    egress = Resolver({"db.example": "127.0.0.1"})
    mine = await take(cache, WS_A, config, egress)
    pid = await backend(mine)
    await cache.give_back(mine)
    # The same connection id and config, another workspace: a session of its own.
    theirs = await take(cache, WS_B, config, egress)
    assert not cache.reused(theirs)
    assert await backend(theirs) != pid
    assert cache.idle_count(WS_A) == 1
    await cache.give_back(theirs)
    again = await take(cache, WS_A, config, egress)
    assert await backend(again) == pid
    await cache.give_back(again)
    await cache.close()


async def test_a_changed_config_opens_a_new_session_and_closes_the_old(
    database_url: str, port: int
) -> None:
    cache = ConnectionCache()
    egress = Resolver({"db.example": "127.0.0.1"})
    old = await take(cache, WS_A, config_of(database_url, port), egress)
    pid = await backend(old)
    await cache.give_back(old)
    new = await take(cache, WS_A, config_of(database_url, port, connect_timeout=9), egress)
    assert not cache.reused(new)
    assert await backend(new) != pid
    await cache.close()  # waits for the old session's close too
    assert old._conn.is_closed()  # type: ignore[attr-defined]
    await new.close()


async def test_reuse_is_refused_when_the_host_now_resolves_to_a_private_address(
    database_url: str, port: int
) -> None:
    cache = ConnectionCache()
    config = config_of(database_url, port)
    egress = Resolver({"db.example": "127.0.0.1"})
    first = await take(cache, WS_A, config, egress)
    await cache.give_back(first)
    egress.answers["db.example"] = "10.1.2.3"  # private, and not allowed
    with pytest.raises(ConfigError, match=r"config\.host: resolves to a private"):
        await take(cache, WS_A, config, egress)
    assert first._conn.is_closed()  # type: ignore[attr-defined]
    assert cache.idle_count() == 0
    await cache.close()


async def test_a_session_given_back_inside_a_transaction_is_closed(
    database_url: str, port: int
) -> None:
    cache = ConnectionCache()
    config = config_of(database_url, port)
    egress = Resolver({"db.example": "127.0.0.1"})
    held = await take(cache, WS_A, config, egress)
    await held._conn.execute("BEGIN")  # type: ignore[attr-defined]
    await cache.give_back(held)
    assert held._conn.is_closed()  # type: ignore[attr-defined]
    assert cache.idle_count() == 0


@pytest.mark.looptime(noop_cycles=5000)
async def test_an_idle_session_closes_after_the_idle_time(database_url: str, port: int) -> None:
    cache = ConnectionCache(idle_seconds=60)
    config = config_of(database_url, port)
    held = await take(cache, WS_A, config, Resolver({"db.example": "127.0.0.1"}))
    await cache.give_back(held)
    await asyncio.sleep(59)
    assert cache.idle_count() == 1
    await asyncio.sleep(2)
    assert cache.idle_count() == 0
    await cache.close()  # nothing idle left; waits for the expired one's close
    assert held._conn.is_closed()  # type: ignore[attr-defined]


async def test_a_rotated_secret_is_used_by_the_next_run(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    role = f"rotated_{uuid.uuid4().hex[:8]}"
    await pool.execute(f"CREATE ROLE {role} LOGIN")
    try:
        secrets = tmp_path / "secrets.json"
        secrets.write_text(json.dumps({"workspaces": {WS_A: {"PG_USER": "postgres"}}}))
        async with tcp_front(database_url) as port:
            config = config_of(database_url, port, host="127.0.0.1", user={"$secret": "PG_USER"})
            migrate = Migrate(
                books=lambda task: None,  # type: ignore[arg-type,return-value]
                blobs=None,  # type: ignore[arg-type]
                secrets=SecretStore.from_file(secrets, {}, isolated=True),
                settings=MigrateSettings(),
                policy=CloudPolicy(tmp_path, LOOPBACK),
                connections=ConnectionCache(),
            )
            run = migrate_spec(ConnectionSpec(CONNECTION, "postgres", config))
            assert await current_user(migrate, run) == "postgres"
            secrets.write_text(json.dumps({"workspaces": {WS_A: {"PG_USER": role}}}))
            assert await current_user(migrate, run) == role
            await migrate._connections.close()  # type: ignore[union-attr]
    finally:
        await pool.execute(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
        )
        await pool.execute(f"DROP ROLE {role}")


async def current_user(migrate: Migrate, run: MigrateSpec) -> str:
    task = LeasedTask(str(uuid.uuid4()), run.job_id, "migrate", 1, 3, str(uuid.uuid4()))
    ctx = TaskContext(task)
    connector = await migrate.connect(ctx, run, run.source)
    try:
        user: str = await connector._conn.fetchval("SELECT current_user")  # type: ignore[attr-defined]
        return user
    finally:
        await migrate.release(connector)


def migrate_spec(connection: ConnectionSpec) -> MigrateSpec:
    return MigrateSpec(
        job_id=str(uuid.uuid4()),
        workspace_id=WS_A,
        pipeline_id=str(uuid.uuid4()),
        source=connection,
        destination=connection,
        streams=[],
        spec={},
        write_mode=WriteMode.APPEND,
        phase=None,
        dry_run=False,
        load_on_agent=False,
        rows_extracted=0,
        blob_prefix="",
        blob=BlobSettings("local", "/nonexistent"),
    )
