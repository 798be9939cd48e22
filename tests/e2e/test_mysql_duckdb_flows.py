"""A MariaDB source and a DuckDB destination through every flow, with real
processes: a setu-server (its cloud worker inside), setu-agent processes A
and B, the session's MariaDB server on loopback, S3 (moto) on loopback as
the shared blob store, and DuckDB files read back with duckdb.

Each flow (cloud → cloud, agent → cloud, cloud → agent, agent → agent)
moves one table of a realistic mix of MariaDB types, a NULL in every
column, seven scripts of unicode and each type's edges, in several batches,
and the DuckDB file must hold exactly the source's values, value by value,
with the run's counts right. A cloud DuckDB file lies in the workspace's
folder (`SETU_LOCAL_FILES_ROOT/<workspace id>/`); the cloud reaches the
MariaDB on loopback as an allowed network (tests/servers.py). An agent's
MariaDB password is a secret reference, resolved by the cloud worker (a
shared secret of the server's) and by agent A from its own secrets.

Also: an upsert run twice (the second counts the rows it left alone as
unchanged) and an incremental run by cursor (the second reads only the
new rows).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_client.clock import SystemClock
from setu_server.service.admin import AdminService
from tests.factories import Tenant, make_tenant
from tests.s3server import S3Endpoint
from tests.servers import checked_in_agent, server_process, wait_healthy

if TYPE_CHECKING:
    from tests.mariadb import MySQLDatabase

S = common_pb2
pytestmark = pytest.mark.slow


ROWS = 300
BATCH_ROWS = 64  # five batches of 64 and a last one of 44: a lost batch shows
PASSWORD_SECRET = "MYSQL_PASSWORD"  # how an agent's connection names the password

TABLE = """
CREATE TABLE orders (
    id int NOT NULL PRIMARY KEY,
    name varchar(64) NULL,
    amount decimal(12,2) NULL,
    created datetime(6) NULL,
    stamp timestamp NULL DEFAULT NULL,
    doc json NULL,
    flag tinyint(1) NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""
COLUMNS = ("id", "name", "amount", "created", "stamp", "doc", "flag")
# What each column lands as in DuckDB (docs/data-types.md, "DuckDB").
DUCKDB_TYPES = {
    "id": "INTEGER",
    "name": "VARCHAR",
    "amount": "DECIMAL(12,2)",
    "created": "TIMESTAMP",
    "stamp": "TIMESTAMP WITH TIME ZONE",
    "doc": "JSON",
    "flag": "BOOLEAN",
}

NAMES = [
    "plain ascii",
    "",  # empty, not NULL
    "Ünïcödé façade",
    "नमस्ते दुनिया",
    "日本語のテキスト",
    "مرحبا بالعالم",
    "Привет, мир",
    "שלום עולם",
    "emoji 🚀🧪👩🏽‍💻",
    'it\'s "quoted" and `ticked`',
    "tab\tnew\nline\\backslash",
    "x" * 64,  # the column's full width
]
# Each type's edges, on the first rows; the rest are ordinary values.
AMOUNTS = [Decimal("9999999999.99"), Decimal("-9999999999.99"), Decimal("0.00"), Decimal("-0.01")]
CREATED = [datetime(1000, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)]
STAMPS = [datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC)]
DOCS: list[Any] = [
    None,  # JSON's null: a value, not SQL NULL
    [],
    "just text ü",
    {"big": 12345678901234567890, "exact": 0.1, "nested": {"a": [1, "two", None, True]}},
]

Row = tuple[Any, ...]
CENT = Decimal("0.01")


class _Null:
    """SQL NULL in a model row (None is JSON's null in `doc`)."""

    def __repr__(self) -> str:
        return "NULL"


NULL: Any = _Null()


def source_row(i: int, *, version: int = 0) -> Row:
    """Row `i` of the source table: the first rows hold each type's edges
    (and no NULL), then column `i % 8` (1 to 6) is NULL, so each column
    holds NULLs; `version` changes the amount (an update)."""
    at = i - 1
    name = NAMES[at % len(NAMES)]
    amount = (
        AMOUNTS[at]
        if at < len(AMOUNTS)
        else (Decimal((i * 7919) % 10**9 * (-1) ** i) / 100 + version).quantize(CENT)
    )
    created = (
        CREATED[at]
        if at < len(CREATED)
        else datetime(2020, 1, 1) + timedelta(days=i, microseconds=i * 123457)
    )
    stamp = (
        STAMPS[at]
        if at < len(STAMPS)
        else datetime(2001, 1, 1, tzinfo=UTC) + timedelta(hours=i * 37, seconds=i)
    )
    doc = DOCS[at] if at < len(DOCS) else {"i": i, "tags": ["a", "ü", i / 4], "ok": i % 2 == 0}
    row: list[Any] = [i, name, amount, created, stamp, doc, i % 3 == 0]
    if i > len(NAMES) and 1 <= i % 8 <= 6:
        row[i % 8] = NULL
    return tuple(row)


@dataclass
class Source:
    """The `orders` table in a scratch MariaDB database, and the model of
    what it holds (id → row)."""

    database: MySQLDatabase
    config: dict[str, Any]
    model: dict[int, Row] = field(default_factory=dict)

    async def create(self) -> None:
        await self._execute(TABLE)

    async def put(self, rows: list[Row]) -> None:
        """Inserts or replaces each row, in the source and in the model."""
        await self._execute(
            f"REPLACE INTO orders ({', '.join(COLUMNS)}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [_as_parameters(row) for row in rows],
        )
        self.model |= {row[0]: row for row in rows}

    async def _execute(self, sql: str, rows: list[tuple[Any, ...]] | None = None) -> None:
        conn = await self.database.connect()
        try:
            async with conn.cursor() as cursor:
                # The timestamps of `rows` are UTC wall times.
                await cursor.execute("SET time_zone = '+00:00'")
                if rows is None:
                    await cursor.execute(sql)
                else:
                    await cursor.executemany(sql, rows)
        finally:
            conn.close()
            await conn.ensure_closed()

    def rows(self) -> list[Row]:
        return [self.model[i] for i in sorted(self.model)]


def _as_parameters(row: Row) -> tuple[Any, ...]:
    i, name, amount, created, stamp, doc, flag = (None if v is NULL else v for v in row)
    return (
        i,
        name,
        amount,
        created,
        stamp.replace(tzinfo=None) if stamp is not None else None,
        json.dumps(doc, ensure_ascii=False) if row[5] is not NULL else None,
        int(flag) if flag is not None else None,
    )


def landed(path: Path, table: str = "orders") -> tuple[list[Row], dict[str, str]]:
    """A DuckDB file's `table`, by id, in the model's spelling (SQL NULL as
    NULL, JSON decoded), and its column types."""
    import duckdb

    with duckdb.connect(str(path), read_only=True) as db:
        db.execute("SET TimeZone = 'UTC'")
        types = dict(
            db.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'main' AND table_name = ? ORDER BY ordinal_position",
                [table],
            ).fetchall()
        )
        found = db.execute(f"SELECT {', '.join(COLUMNS)} FROM {table} ORDER BY id").fetchall()
    rows = []
    for row in found:
        values = [NULL if v is None else v for v in row]
        if row[5] is not None:
            values[5] = json.loads(row[5])
        rows.append(tuple(values))
    return rows, types


def first_difference(got: list[Row], want: list[Row]) -> str:
    """Where two row lists part, for a failing assertion's message."""
    for g, w in zip(got, want, strict=False):
        if g != w:
            return f"got {g!r}\nwant {w!r}"
    return f"{len(got)} rows landed, {len(want)} expected"


@dataclass
class Stage:
    """A setu-server process on the test's own Setu database, its client for
    a fresh tenant, agent B's id and token, and the MariaDB source."""

    client: SetuClient
    tenant: Tenant
    agent_b: tuple[uuid.UUID, str]
    source: Source
    files_root: Path
    logs: Path
    agent_env: dict[str, str]
    port: int

    def agent(
        self, name: str, token: str
    ) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
        log = self.logs / f"agent-{name}.log"
        return checked_in_agent(self.port, token, log, None, **self.agent_env)

    @contextlib.asynccontextmanager
    async def agents(self, *names: str) -> AsyncIterator[None]:
        """Agents "a" (the tenant's) and "b", as the flow needs them."""
        tokens = {"a": self.tenant.agent_token, "b": self.agent_b[1]}
        async with contextlib.AsyncExitStack() as stack:
            for name in names:
                await stack.enter_async_context(self.agent(name, tokens[name]))
            yield

    def runtime(self, where: str) -> str:
        """A job's runtime name for a place ("cloud", "a" or "b")."""
        ids = {"a": self.tenant.agent_id, "b": self.agent_b[0]}
        return "cloud" if where == "cloud" else f"agent:{ids[where]}"

    async def mysql_connection(self, where: str) -> Any:
        # The password is a secret reference wherever the connection runs: the
        # server's cloud worker and agent A each resolve it from their own secrets.
        config = self.source.config | {"password": {"$secret": PASSWORD_SECRET}}
        if where == "cloud":
            return await self.client.create_connection("mariadb", "mysql", config)
        return await self.client.create_connection(
            "mariadb-edge", "mysql", config, "agent", str(self.tenant.agent_id)
        )

    async def duckdb_connection(self, where: str, name: str) -> tuple[Any, Path]:
        """A DuckDB destination and where its file lies: in the cloud a path
        relative to the workspace's folder, on agent B an absolute one."""
        if where == "cloud":
            path = self.files_root / str(self.tenant.workspace_id) / f"{name}.duckdb"
            config = {"path": f"{name}.duckdb", "create": True}
            made = await self.client.create_connection("lake", "duckdb", config)
            return made, path
        folder = self.logs / "agent-b-files"
        folder.mkdir(exist_ok=True)
        path = folder / f"{name}.duckdb"
        made = await self.client.create_connection(
            "lake-edge",
            "duckdb",
            {"path": str(path), "create": True},
            "agent",
            str(self.agent_b[0]),
        )
        return made, path

    async def run(self, pipeline_id: str) -> tuple[Any, Any, list[str]]:
        """Runs the pipeline to its end: the job, its outputs, its timeline."""
        job = await self.client.submit_run(pipeline_id)
        await self.client.wait_for_job(job.id)
        done = await self.client.get_job(job.id)
        outputs = await self.client.job_outputs(job.id)
        timeline = [e.message async for e in self.client.job_events(job.id)]
        return done, outputs, timeline


@pytest.fixture
async def stage(
    database_url: str,
    pool: asyncpg.Pool,
    mysql_database: MySQLDatabase,
    s3_endpoint: S3Endpoint,
    tmp_path: Path,
) -> AsyncIterator[Stage]:
    tenant = await make_tenant(pool)
    second = await AdminService(pool, SystemClock()).create_agent(tenant.workspace_id, "agent b")
    bucket = await s3_endpoint.make_bucket()
    config = mysql_database.config()
    files_root = tmp_path / "files"
    files_root.mkdir()
    env = s3_endpoint.env | {
        "SETU_DATABASE_URL": database_url,
        "SETU_BLOB_URL": f"s3://{bucket}",
        "SETU_S3_ENDPOINT_URL": s3_endpoint.endpoint_url,
        "SETU_LOCAL_FILES_ROOT": str(files_root),  # one folder per workspace
        "SETU_BATCH_ROWS": str(BATCH_ROWS),
        "SETU_TASK_RETRY_BACKOFF_SECONDS": "0.05",
        "SETU_LOG_FORMAT": "text",
        "SETU_SHARED_SECRETS": PASSWORD_SECRET,
        f"SETU_SECRET_{PASSWORD_SECRET}": str(config["password"]),
    }
    agent_env = s3_endpoint.env | {
        "SETU_AGENT_EXTRA_HANDLERS": "",  # the real engine, not the test handlers
        "SETU_BATCH_ROWS": str(BATCH_ROWS),
        f"SETU_SECRET_{PASSWORD_SECRET}": str(config["password"]),
    }
    source = Source(mysql_database, config)
    await source.create()
    with server_process(env, tmp_path / "server.log") as (_, port):
        await wait_healthy(port)
        async with SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client:
            yield Stage(
                client,
                tenant,
                (second.value.id, second.secret),
                source,
                files_root,
                tmp_path,
                agent_env,
                port,
            )


FLOWS = {
    "cloud→cloud": ("cloud", "cloud"),
    "agent→cloud": ("a", "cloud"),
    "cloud→agent": ("cloud", "b"),
    "agent→agent": ("a", "b"),
}


def agents_for(*places: str) -> list[str]:
    return sorted({p for p in places if p != "cloud"})


@pytest.mark.parametrize("flow", list(FLOWS))
async def test_every_flow_lands_the_mariadb_table_in_duckdb_value_by_value(
    stage: Stage, flow: str
) -> None:
    extract_at, load_at = FLOWS[flow]
    await stage.source.put([source_row(i) for i in range(1, ROWS + 1)])
    async with stage.agents(*agents_for(extract_at, load_at)):
        src = await stage.mysql_connection(extract_at)
        dst, path = await stage.duckdb_connection(load_at, "flow")
        pipeline = await stage.client.create_pipeline("orders", src.id, dst.id)
        job, outputs, timeline = await stage.run(pipeline.id)

    assert job.state == S.JOB_STATE_SUCCEEDED, (job.error_message, timeline)
    assert (job.extract_runtime, job.load_runtime) == (
        stage.runtime(extract_at),
        stage.runtime(load_at),
    )
    assert job.progress.rows_loaded == ROWS
    assert [(o.rows_extracted, o.rows_loaded) for o in outputs.streams] == [(ROWS, ROWS)]
    assert [(o.inserted, o.updated, o.unchanged) for o in outputs.streams] == [(ROWS, 0, 0)]
    rows, types = landed(path)
    want = stage.source.rows()
    assert rows == want, first_difference(rows, want)
    assert types == DUCKDB_TYPES
    if load_at == "cloud":
        # In the workspace's own folder, nowhere else under the root.
        assert path.parent.parent == stage.files_root
        assert [p.name for p in stage.files_root.iterdir()] == [str(stage.tenant.workspace_id)]


async def test_an_upsert_run_twice_counts_the_rows_it_left_alone_as_unchanged(
    stage: Stage,
) -> None:
    """cloud → agent: the second run updates the five rows that changed,
    inserts the three new ones and leaves the rest as they were."""
    await stage.source.put([source_row(i) for i in range(1, ROWS + 1)])
    async with stage.agents("b"):
        src = await stage.mysql_connection("cloud")
        dst, path = await stage.duckdb_connection("b", "upserted")
        pipeline = await stage.client.create_pipeline("orders", src.id, dst.id, write_mode="upsert")
        first, first_outputs, timeline = await stage.run(pipeline.id)
        assert first.state == S.JOB_STATE_SUCCEEDED, (first.error_message, timeline)
        assert [(o.inserted, o.updated, o.unchanged) for o in first_outputs.streams] == [
            (ROWS, 0, 0)
        ]

        changed = [9, 11, 150, 299, 300]  # none with a NULL amount: each row changes
        assert all(source_row(i, version=1) != source_row(i) for i in changed)
        await stage.source.put(
            [source_row(i, version=1) for i in changed]
            + [source_row(i) for i in range(ROWS + 1, ROWS + 4)]
        )
        second, outputs, timeline = await stage.run(pipeline.id)

    assert second.state == S.JOB_STATE_SUCCEEDED, (second.error_message, timeline)
    assert [(o.rows_extracted, o.rows_loaded) for o in outputs.streams] == [(ROWS + 3, ROWS + 3)]
    assert [(o.inserted, o.updated, o.unchanged) for o in outputs.streams] == [
        (3, len(changed), ROWS - len(changed))
    ]
    rows, _ = landed(path)
    want = stage.source.rows()
    assert rows == want, first_difference(rows, want)


async def test_an_incremental_run_by_cursor_reads_only_the_new_rows(stage: Stage) -> None:
    """agent → cloud, by `id`: the second run reads the 20 rows added since
    the first, and the DuckDB table ends equal to the source, each row once."""
    await stage.source.put([source_row(i) for i in range(1, ROWS + 1)])
    async with stage.agents("a"):
        src = await stage.mysql_connection("a")
        dst, path = await stage.duckdb_connection("cloud", "increments")
        spec = {"sync": {"*": {"mode": "incremental", "cursor": "id"}}}
        pipeline = await stage.client.create_pipeline("orders", src.id, dst.id, spec=spec)
        first, first_outputs, timeline = await stage.run(pipeline.id)
        assert first.state == S.JOB_STATE_SUCCEEDED, (first.error_message, timeline)
        assert [o.rows_extracted for o in first_outputs.streams] == [ROWS]

        await stage.source.put([source_row(i) for i in range(ROWS + 1, ROWS + 21)])
        second, outputs, timeline = await stage.run(pipeline.id)

    assert second.state == S.JOB_STATE_SUCCEEDED, (second.error_message, timeline)
    assert [(o.rows_extracted, o.rows_loaded) for o in outputs.streams] == [(20, 20)]
    assert any(f"incremental from id > {ROWS}" in m for m in timeline), timeline
    rows, _ = landed(path)
    want = stage.source.rows()
    assert rows == want, first_difference(rows, want)
    state = await stage.client.get_pipeline_state(pipeline.id)
    assert [s.cursor.value for s in state.streams] == [str(ROWS + 20)]
