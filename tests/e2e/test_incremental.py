"""Incremental streams through the real server, SDK, cloud worker and
providers (cloud → cloud): each later run reads only the delta, the
destination ends equal to the source, the saved cursor moves only with a
committed load, and the state can be shown and reset (SDK, CLI, API)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_client.errors import InvalidArgument, NotFound
from tests.databases import postgres_config, scratch_database
from tests.e2e.test_edge_runs import ROWS as EDGE_ROWS
from tests.e2e.test_edge_runs import Edge, edge, rows_of  # noqa: F401 (a fixture)

S = common_pb2
T0 = datetime(2026, 1, 1, tzinfo=UTC)
Model = dict[int, tuple[int, datetime]]


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    return {
        "data_dir": tmp_path / "server",
        "batch_rows": 16,
        "task_retry_backoff_seconds": 0.05,
    }


class Source:
    """An `orders` table in PostgreSQL or SQLite, changed by the test, and the
    model of what it holds."""

    def __init__(self, kind: str, url: str, path: Path) -> None:
        self.kind, self._url, self._path = kind, url, path
        self.model: Model = {}

    async def create(self) -> tuple[str, dict[str, Any]]:
        if self.kind == "postgres":
            await self._pg(
                "CREATE TABLE orders (id bigint PRIMARY KEY, amount integer, "
                "updated_at timestamptz NOT NULL); CREATE INDEX ON orders (updated_at)"
            )
            return "postgres", postgres_config(self._url)
        with sqlite3.connect(self._path) as db:
            db.execute(
                "CREATE TABLE orders (id INTEGER PRIMARY KEY, amount INTEGER, "
                "updated_at TIMESTAMPTZ NOT NULL)"
            )
        return "sqlite", {"path": str(self._path)}

    async def put(self, rows: Model) -> None:
        """Inserts or updates each row (id → amount, updated_at)."""
        self.model.update(rows)
        values = [(i, a, at) for i, (a, at) in rows.items()]
        if self.kind == "postgres":
            conn = await asyncpg.connect(self._url)
            try:
                await conn.executemany(
                    "INSERT INTO orders VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE "
                    "SET amount = excluded.amount, updated_at = excluded.updated_at",
                    values,
                )
            finally:
                await conn.close()
            return
        with sqlite3.connect(self._path) as db:
            db.executemany(
                "INSERT OR REPLACE INTO orders VALUES (?, ?, ?)",
                [(i, a, at.isoformat(sep=" ")) for i, a, at in values],
            )

    async def _pg(self, sql: str) -> None:
        conn = await asyncpg.connect(self._url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()


def as_rows(model: Model) -> list[tuple[int, int, datetime]]:
    return [(i, a, at) for i, (a, at) in sorted(model.items())]


def sync(cursor: str, lookback: Any = 0) -> dict[str, Any]:
    return {"sync": {"orders": {"mode": "incremental", "cursor": cursor, "lookback": lookback}}}


async def run(client: SetuClient, pipeline_id: str) -> tuple[Any, int]:
    """Runs the pipeline; returns the job and the rows it extracted."""
    job = await client.submit_run(pipeline_id)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    outputs = await client.job_outputs(job.id)
    return done, sum(o.rows_extracted for o in outputs.streams)


@dataclass
class Orders:
    """A test's `orders` source and the PostgreSQL destination it copies to
    (both scratch databases), and the pipeline between them if it asked."""

    client: SetuClient
    source: Source
    destination_url: str
    pipeline_id: str = ""

    async def connections(self) -> tuple[Any, Any]:
        """The source (its table created) and destination connections."""
        src = await self.client.create_connection("source", *await self.source.create())
        dst = await self.client.create_connection(
            "destination", "postgres", postgres_config(self.destination_url)
        )
        return src, dst

    async def landed(self) -> list[tuple[int, int, datetime]]:
        """The destination's orders, by id."""
        conn = await asyncpg.connect(self.destination_url)
        try:
            found = await conn.fetch("SELECT id, amount, updated_at FROM orders ORDER BY id")
        finally:
            await conn.close()
        return [(r["id"], r["amount"], r["updated_at"]) for r in found]


MakeOrders = Callable[..., Awaitable[Orders]]


@pytest.fixture
async def make_orders(
    client: SetuClient, pg_server_url: str, tmp_path: Path
) -> AsyncIterator[MakeOrders]:
    """Makes an Orders: `make_orders(mode, spec, kind=…)` with the pipeline
    (named `orders`) over it, `make_orders()` without. Its databases are
    dropped when the test ends."""
    async with AsyncExitStack() as stack:

        async def make(
            mode: str | None = None, spec: dict[str, Any] | None = None, *, kind: str = "postgres"
        ) -> Orders:
            source_url = await stack.enter_async_context(scratch_database(pg_server_url))
            destination_url = await stack.enter_async_context(scratch_database(pg_server_url))
            orders = Orders(
                client, Source(kind, source_url, tmp_path / "source.db"), destination_url
            )
            if mode is None:
                return orders
            src, dst = await orders.connections()
            made = await client.create_pipeline(
                "orders", src.id, dst.id, spec=spec or {}, write_mode=mode
            )
            return dataclasses.replace(orders, pipeline_id=made.id)

        yield make


def rows(ids: range, amount: int, at: datetime) -> Model:
    return {i: (amount, at + timedelta(hours=i)) for i in ids}


@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
@pytest.mark.parametrize("direct_max_rows", [0, 50_000], ids=["staged", "direct"])
async def test_upsert_runs_read_only_the_delta_and_end_equal_to_the_source(
    client: SetuClient, make_orders: MakeOrders, kind: str, direct_max_rows: int
) -> None:
    orders = await make_orders("upsert", sync("updated_at", "1h"), kind=kind)
    source, made = orders.source, orders.pipeline_id
    await source.put(rows(range(1, 101), 1, T0))

    job, read = await run(client, made)
    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    assert read == 100
    assert await orders.landed() == as_rows(source.model)
    high = max(at for _, at in source.model.values())

    # Updates to existing keys, inserts, and a row committed late with a
    # cursor 30 minutes behind the saved one: inside the 1 h lookback.
    later = T0 + timedelta(days=30)
    await source.put(rows(range(5, 8), 2, later) | rows(range(101, 106), 2, later))
    await source.put({500: (9, high - timedelta(minutes=30))})
    job, read = await run(client, made)
    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    in_window = [i for i, (_, at) in source.model.items() if at >= high - timedelta(hours=1)]
    assert read == len(in_window) < 20
    assert await orders.landed() == as_rows(source.model)

    # Third run: one more update; the window starts from run 2's maximum.
    high = max(at for _, at in source.model.values())
    await source.put({1: (3, later + timedelta(days=10))})
    job, read = await run(client, made)
    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    in_window = [i for i, (_, at) in source.model.items() if at >= high - timedelta(hours=1)]
    assert read == len(in_window) < 20
    assert await orders.landed() == as_rows(source.model)
    events = [e.message async for e in client.job_events(job.id)]
    assert any(m.startswith("stream ") and "incremental from updated_at >=" in m for m in events)


@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
async def test_append_runs_add_only_the_new_rows(
    client: SetuClient, make_orders: MakeOrders, kind: str
) -> None:
    orders = await make_orders("append", sync("id"), kind=kind)
    source, made = orders.source, orders.pipeline_id
    await source.put(rows(range(1, 41), 1, T0))
    reads = []
    for new in (range(41, 46), range(46, 49)):
        job, read = await run(client, made)
        assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
        reads.append(read)
        await source.put(rows(new, 2, T0))
    job, read = await run(client, made)
    reads.append(read)
    assert reads == [40, 5, 3]
    # Append: every source row exactly once (no boundary row twice).
    assert await orders.landed() == as_rows(source.model)


async def test_rows_sharing_the_saved_cursor_value_are_neither_lost_nor_duplicated(
    client: SetuClient, make_orders: MakeOrders
) -> None:
    orders = await make_orders("upsert", sync("updated_at"))
    source, made = orders.source, orders.pipeline_id
    boundary = T0 + timedelta(hours=1)
    await source.put({1: (1, T0), 2: (1, boundary)})
    job, _ = await run(client, made)
    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    # Committed after run 1 read, with exactly the saved cursor value.
    await source.put({3: (1, boundary), 4: (1, boundary)})
    job, read = await run(client, made)
    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    assert read == 3  # the boundary value is re-read: 2, 3 and 4
    assert await orders.landed() == as_rows(source.model)


async def test_a_failed_run_leaves_the_cursor_and_the_next_reads_the_same_delta(
    client: SetuClient, make_orders: MakeOrders
) -> None:
    orders = await make_orders("upsert", sync("updated_at"))
    source, made = orders.source, orders.pipeline_id
    await source.put(rows(range(1, 11), 1, T0))
    job, _ = await run(client, made)
    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    before = (await client.get_pipeline_state(made)).streams[0].cursor.value

    conn = await asyncpg.connect(orders.destination_url)
    await conn.execute("ALTER TABLE orders ADD CONSTRAINT small CHECK (amount < 100)")
    later = T0 + timedelta(days=30)
    await source.put(rows(range(20, 24), 500, later))
    job, _ = await run(client, made)
    assert job.state == S.JOB_STATE_FAILED
    assert (await client.get_pipeline_state(made)).streams[0].cursor.value == before

    await conn.execute("ALTER TABLE orders DROP CONSTRAINT small")
    await conn.close()
    job, read = await run(client, made)
    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    assert read == 5  # the saved boundary row, and the 4 the failed run did not land
    assert await orders.landed() == as_rows(source.model)


async def test_state_is_shown_and_reset_through_the_sdk_and_cli(
    client: SetuClient, make_orders: MakeOrders, server: Any, tenant: Any
) -> None:
    orders = await make_orders("upsert", sync("updated_at"))
    source, made = orders.source, orders.pipeline_id
    await source.put(rows(range(1, 31), 1, T0))
    assert list((await client.get_pipeline_state(made)).streams) == []
    job, _ = await run(client, made)

    state = await client.get_pipeline_state(made)
    [stream] = state.streams
    assert stream.stream == "public.orders" and stream.cursor.column == "updated_at"
    assert stream.cursor.type == "timestamptz" and stream.rows == 30
    assert datetime.fromisoformat(stream.cursor.value) == T0 + timedelta(hours=30)
    assert stream.last_job_id == job.id

    cli = Cli(f"127.0.0.1:{server.port}", tenant.api_key)
    shown = await cli("pipelines", "state", "orders", "--json")
    assert json.loads(shown)["streams"][0]["cursor"]["column"] == "updated_at"
    assert "public.orders" in await cli("pipelines", "state", "orders")

    with pytest.raises(NotFound, match="no saved state for stream 'nope'"):
        await client.reset_pipeline_state(made, "nope")
    said = await cli("pipelines", "reset-state", "orders", "--stream", "public.orders")
    assert "reset public.orders" in said
    assert list((await client.get_pipeline_state(made)).streams) == []
    job, read = await run(client, made)
    assert read == 30  # a reset stream is read in full
    assert await client.reset_pipeline_state(made) == ["public.orders"]


async def test_the_spec_is_checked_against_the_catalog_and_merge_is_refused(
    client: SetuClient, make_orders: MakeOrders
) -> None:
    orders = await make_orders()
    source = orders.source
    src, dst = await orders.connections()
    with pytest.raises(InvalidArgument, match="merge needs a full sync"):
        await client.create_pipeline(
            "m", src.id, dst.id, spec=sync("updated_at"), write_mode="merge"
        )
    with pytest.raises(InvalidArgument, match="overwrite needs a full sync"):
        await client.create_pipeline(
            "o", src.id, dst.id, spec=sync("updated_at"), write_mode="overwrite"
        )
    with pytest.raises(InvalidArgument, match="lookback"):
        await client.create_pipeline("l", src.id, dst.id, spec=sync("updated_at", "soon"))
    await client.discover_streams(src.id)
    with pytest.raises(InvalidArgument, match=r"sync\.orders\.cursor.*no column 'changed'"):
        await client.create_pipeline("c", src.id, dst.id, spec=sync("changed"))
    # A dedupe without order_by keeps the latest row by the cursor, as a
    # run does: accepted at create time too.
    latest = sync("updated_at") | {"operators": [{"op": "dedupe", "keys": ["id"]}]}
    await client.create_pipeline("d", src.id, dst.id, spec=latest, write_mode="upsert")
    await source._pg("ALTER TABLE orders ADD COLUMN tags jsonb")
    await client.discover_streams(src.id)
    with pytest.raises(InvalidArgument, match="type json, which a cursor cannot follow"):
        await client.create_pipeline("t", src.id, dst.id, spec=sync("tags"))


async def test_reset_and_show_validate_and_stay_in_the_workspace(
    client: SetuClient, server: Any
) -> None:
    from setu_client._proto.setu.v1 import pipelines_pb2, pipelines_pb2_grpc

    with pytest.raises(NotFound):
        await client.get_pipeline_state("00000000-0000-4000-8000-000000000000")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pipelines_pb2_grpc.PipelineServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.GetPipelineState(pipelines_pb2.GetPipelineStateRequest(pipeline_id="x"))
        assert raised.value.code() in (
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.UNAUTHENTICATED,
        )


class Cli:
    """`setu` as a user runs it, against the in-process server (without
    blocking the loop that server runs on)."""

    def __init__(self, server: str, api_key: str) -> None:
        self._server, self._key = server, api_key

    async def __call__(self, *args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "setu_cli",
            *args,
            "--server",
            self._server,
            "--api-key",
            self._key,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        return out.decode()


async def test_every_edge_flow_reads_only_the_delta_and_advances_the_state(
    edge: Edge,  # noqa: F811 (the fixture imported above)
) -> None:
    """agent → cloud, cloud → agent and agent → agent: the saved cursor
    reaches the extract wherever it runs, and the state advances with the
    load wherever that commits."""
    client, (b_id, b_token) = edge.client, edge.agent_b
    async with edge.agent("a", edge.tenant.agent_token), edge.agent("b", b_token):
        src_edge = await client.create_connection(
            "src-edge",
            "postgres",
            edge.edge_config(edge.source),
            "agent",
            str(edge.tenant.agent_id),
        )
        dst_edge = await client.create_connection(
            "dst-edge", "postgres", edge.edge_config(edge.destination), "agent", str(b_id)
        )
        src_cloud = await client.create_connection(
            "src-cloud", "postgres", postgres_config(edge.source)
        )
        dst_cloud = await client.create_connection(
            "dst-cloud", "postgres", postgres_config(edge.destination)
        )
        flows = {
            "a2c": (src_edge, dst_cloud),
            "c2a": (src_cloud, dst_edge),
            "a2a": (src_edge, dst_edge),
        }
        made = {}
        for table, (source, destination) in flows.items():
            spec = {"destination": {"orders": table}} | sync("id")
            made[table] = await client.create_pipeline(
                f"to-{table}",
                source.id,
                destination.id,
                streams=["orders"],
                spec=spec,
                write_mode="upsert",
            )
        for table, p in made.items():
            job, read = await run(client, p.id)
            assert job.state == S.JOB_STATE_SUCCEEDED, (table, job.error_message)
            assert read == EDGE_ROWS, table
        conn = await asyncpg.connect(edge.source)
        await conn.execute(
            "INSERT INTO orders SELECT i, md5(i::text), i * 1.5 "
            "FROM generate_series($1::int, $2::int) i",
            EDGE_ROWS + 1,
            EDGE_ROWS + 10,
        )
        await conn.close()
        expected = await rows_of(edge.source, "orders")
        for table, p in made.items():
            job, read = await run(client, p.id)
            assert job.state == S.JOB_STATE_SUCCEEDED, (table, job.error_message)
            assert read == 11, table  # the boundary row (upsert) and the 10 new ones
            assert await rows_of(edge.destination, table) == expected, table
            # Wherever the extract ran, the timeline says what it read, once.
            said = [e.message async for e in client.job_events(job.id)]
            window = f"stream public.orders: incremental from id >= {EDGE_ROWS}"
            assert said.count(window) == 1, (table, said)
            [state] = (await client.get_pipeline_state(p.id)).streams
            assert state.cursor.value == str(EDGE_ROWS + 10), table


@pytest.mark.server(direct_max_rows=10)
async def test_a_small_delta_goes_direct_sized_by_a_count_with_the_cursor_predicate(
    client: SetuClient, make_orders: MakeOrders
) -> None:
    orders = await make_orders("upsert", sync("updated_at"))
    source, made = orders.source, orders.pipeline_id
    await source.put(rows(range(1, 101), 1, T0))
    await source._pg("ANALYZE orders")  # the table's estimate: 100 rows
    job, _ = await run(client, made)
    assert job.phase == S.PHASE_LOAD  # 100 rows: staged
    await source.put(rows(range(101, 106), 2, T0))
    job, read = await run(client, made)
    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    assert (job.phase, read) == (S.PHASE_DIRECT, 6)
    assert await orders.landed() == as_rows(source.model)


async def test_dry_and_cancelled_runs_leave_the_cursor(
    client: SetuClient, make_orders: MakeOrders
) -> None:
    orders = await make_orders("upsert", sync("updated_at"))
    source, made = orders.source, orders.pipeline_id
    await source.put(rows(range(1, 11), 1, T0))
    await run(client, made)
    before = list((await client.get_pipeline_state(made)).streams)
    await source.put(rows(range(11, 15), 1, T0))

    dry = await client.submit_run(made, dry_run=True)
    await client.wait_for_job(dry.id)
    assert (await client.get_job(dry.id)).state == S.JOB_STATE_SUCCEEDED
    held = await client.submit_run(made, start=False)
    await client.cancel_job(held.id)
    assert (await client.get_job(held.id)).state == S.JOB_STATE_CANCELLED
    assert list((await client.get_pipeline_state(made)).streams) == before

    job, read = await run(client, made)
    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    assert read == 5  # the boundary row and the 4 new ones
    assert await orders.landed() == as_rows(source.model)


async def load_waiting(url: str) -> bool:
    """Whether a session on this database waits for a row lock (the load,
    held at the test's uncommitted row)."""
    conn = await asyncpg.connect(url)
    try:
        waiting = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    return bool(waiting)


@pytest.mark.server(direct_max_rows=0)
async def test_a_run_cancelled_mid_load_leaves_the_cursor_and_the_next_reads_the_same_delta(
    client: SetuClient, make_orders: MakeOrders
) -> None:
    """The run's extract has finished (its stream staged, its cursor mark in
    the manifest); its load waits at a row the test holds uncommitted in the
    destination. Cancelled there, the run must not move the saved cursor."""
    orders = await make_orders("append", sync("id"))
    source, made = orders.source, orders.pipeline_id
    await source.put(rows(range(1, 11), 1, T0))
    job, _ = await run(client, made)
    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    before = list((await client.get_pipeline_state(made)).streams)
    # Several batches (batch_rows 16), appended one by one: the load
    # checks for a cancel after each, before its commit.
    later = T0 + timedelta(days=30)
    await source.put(rows(range(20, 60), 2, later))

    holder = await asyncpg.connect(orders.destination_url)
    try:
        await holder.execute("BEGIN")
        await holder.execute("INSERT INTO orders (id, amount, updated_at) VALUES (30, 0, $1)", T0)
        job = await client.submit_run(made)
        deadline = asyncio.get_running_loop().time() + 60
        # Held at row 30 with the extract done (the delta staged, its mark in
        # the manifest); a cloud run may load while it stages, so both are awaited.
        while not (
            await load_waiting(orders.destination_url)
            and (await client.get_job(job.id)).phase == S.PHASE_LOAD
        ):
            assert asyncio.get_running_loop().time() < deadline, (
                "the load never waited at row 30 with the delta staged"
            )
            await asyncio.sleep(0.05)
        await client.cancel_job(job.id, "stop the load")
        await holder.execute("ROLLBACK")
    finally:
        await holder.close()
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    assert done.state == S.JOB_STATE_CANCELLED, done.error_message
    assert list((await client.get_pipeline_state(made)).streams) == before
    assert await orders.landed() == as_rows({i: v for i, v in source.model.items() if i < 20})

    job, read = await run(client, made)
    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    assert read == 40  # the 40 rows the cancelled run did not land (append: > saved)
    assert await orders.landed() == as_rows(source.model)


async def test_an_agent_extracted_run_cancelled_mid_load_leaves_the_cursor(
    edge: Edge,  # noqa: F811 (the fixture imported above)
) -> None:
    """agent → cloud: the cursor mark travels from the agent's extract in the
    staged manifest; the cloud load, held at a row the test holds and then
    cancelled, must not move the saved cursor."""
    client = edge.client
    async with edge.agent("a", edge.tenant.agent_token, SETU_AGENT_BATCH_ROWS="100"):
        src = await client.create_connection(
            "src-edge",
            "postgres",
            edge.edge_config(edge.source),
            "agent",
            str(edge.tenant.agent_id),
        )
        dst = await client.create_connection("dst", "postgres", postgres_config(edge.destination))
        made = await client.create_pipeline(
            "a2c", src.id, dst.id, streams=["orders"], spec=sync("id"), write_mode="append"
        )
        job, read = await run(client, made.id)
        assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
        before = list((await client.get_pipeline_state(made.id)).streams)
        conn = await asyncpg.connect(edge.source)
        await conn.execute(  # three staged parts of 100 rows
            "INSERT INTO orders SELECT i, md5(i::text), i * 1.5 "
            "FROM generate_series($1::int, $2::int) i",
            EDGE_ROWS + 1,
            EDGE_ROWS + 300,
        )
        await conn.close()

        holder = await asyncpg.connect(edge.destination)
        try:
            await holder.execute("BEGIN")
            await holder.execute("INSERT INTO orders (id) VALUES ($1)", EDGE_ROWS + 50)
            job = await client.submit_run(made.id)
            deadline = asyncio.get_running_loop().time() + 120
            while not await load_waiting(edge.destination):
                assert asyncio.get_running_loop().time() < deadline, "the load never got held"
                await asyncio.sleep(0.05)
            assert (await client.get_job(job.id)).phase == S.PHASE_LOAD
            await client.cancel_job(job.id, "stop the load")
            await holder.execute("ROLLBACK")
        finally:
            await holder.close()
        await client.wait_for_job(job.id)
        done = await client.get_job(job.id)
        assert done.state == S.JOB_STATE_CANCELLED, done.error_message
        assert list((await client.get_pipeline_state(made.id)).streams) == before

        job, read = await run(client, made.id)
        assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
        assert read == 300  # the same delta again
        assert await rows_of(edge.destination, "orders") == await rows_of(edge.source, "orders")
