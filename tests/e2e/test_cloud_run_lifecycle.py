"""cloud → cloud runs that go direct, cancel, fail, or are cancelled before
they start; and the counts that reconcile them."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from tests.databases import postgres_config
from tests.factories import Tenant

S = common_pb2


async def fill(url: str, table: str, rows: int, first: int = 1) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            f"CREATE TABLE {table} (id bigint PRIMARY KEY, label text, score double precision)"
        )
        await conn.execute(
            f"INSERT INTO {table} SELECT i, 'row ' || i, i / 3.0 "
            f"FROM generate_series($2::bigint, $2::bigint + $1 - 1) i",
            rows,
            first,
        )
    finally:
        await conn.close()


async def fetch(url: str, query: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(query)]
    finally:
        await conn.close()


async def pipeline(client: SetuClient, source: str, destination: str, **fields: Any) -> str:
    src = await client.create_connection("source", "postgres", postgres_config(source))
    dst = await client.create_connection("destination", "postgres", postgres_config(destination))
    created = await client.create_pipeline("copy", src.id, dst.id, **fields)
    return str(created.id)


async def test_a_small_fresh_run_copies_directly_and_its_counts_reconcile(
    client_for: Any, databases: tuple[str, str], tmp_path: Path
) -> None:
    source, destination = databases
    await fill(source, "orders", 300)
    await fill(source, "refunds", 40)
    _, client = await client_for(batch_rows=64)
    job = await client.submit_run(await pipeline(client, source, destination))
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)

    assert done.state == S.JOB_STATE_SUCCEEDED, done.error_message
    assert done.phase == S.PHASE_DIRECT
    assert not list((tmp_path / "server" / "blobs").rglob("*.zst"))  # nothing staged
    for table in ("orders", "refunds"):
        query = f"SELECT * FROM {table} ORDER BY id"
        assert await fetch(destination, query) == await fetch(source, query)
    outputs = await client.job_outputs(job.id)
    assert [(o.stream, o.rows_extracted, o.rows_loaded) for o in outputs.streams] == [
        ("public.orders", 300, 300),
        ("public.refunds", 40, 40),
    ]
    assert (outputs.totals.rows_extracted, outputs.totals.rows_loaded) == (340, 340)


async def test_cancel_during_a_long_run_ends_cancelled_within_a_batch_and_keeps_the_destination(
    client_for: Any, databases: tuple[str, str]
) -> None:
    source, destination = databases
    await fill(source, "events", 30_000)
    await fill(destination, "events", 3)  # the pre-run content
    _, client = await client_for(batch_rows=100, direct_max_rows=0)
    job = await client.submit_run(await pipeline(client, source, destination))

    async for snapshot in client.watch_job(job.id):
        if snapshot.progress.rows_extracted > 0:
            break
    cancelled = await client.cancel_job(job.id, "enough")
    at_cancel = cancelled.progress.rows_extracted
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)

    assert done.state == S.JOB_STATE_CANCELLED
    assert "enough" in done.error_message
    # One batch may be in flight when the cancel lands, one more staged ahead.
    assert done.progress.rows_extracted <= at_cancel + 2 * 100
    assert done.progress.rows_extracted < 30_000
    assert await fetch(destination, "SELECT id FROM events ORDER BY id") == [(1,), (2,), (3,)]


@contextlib.asynccontextmanager
async def row_in_flight(url: str, table: str, key: int) -> AsyncIterator[None]:
    """Holds an uncommitted row with this key. A load that reaches the same
    key waits for this transaction, so the run is surely still loading when
    the test cancels it, however fast this machine is; the row is rolled
    back on exit and the load goes on."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("BEGIN")
        await conn.execute(f"INSERT INTO {table} (id) VALUES ($1)", key)
        yield
        await conn.execute("ROLLBACK")
    finally:
        await conn.close()


LOAD_ROWS = 30_000


async def cancel_mid_load(
    client_for: Any, databases: tuple[str, str], database_url: str, phase: int, **settings: Any
) -> None:
    """Cancels a run once it has loaded some parts of a stream into a table
    that already held rows; the stream's transaction must roll back."""
    source, destination = databases
    await fill(source, "events", LOAD_ROWS)
    await fill(destination, "events", 3, first=LOAD_ROWS + 1)  # the pre-run content
    before = await fetch(destination, "SELECT * FROM events ORDER BY id")
    _, client = await client_for(batch_rows=100, **settings)

    async with row_in_flight(destination, "events", LOAD_ROWS // 2):
        job = await client.submit_run(await pipeline(client, source, destination))
        async for snapshot in client.watch_job(job.id):
            if snapshot.phase == phase and snapshot.progress.rows_loaded > 0:
                break
        else:
            raise AssertionError(f"the run ended before it loaded anything: {snapshot}")
        await client.cancel_job(job.id, "enough")
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    timeline = [e.message async for e in client.job_events(job.id)]

    assert done.state == S.JOB_STATE_CANCELLED, (done.error_message, timeline)
    assert "enough" in done.error_message
    assert done.phase == phase
    assert await fetch(destination, "SELECT * FROM events ORDER BY id") == before
    # The cancel ended the task: it was not retried as a failure.
    attempts = await fetch(
        database_url, f"SELECT state, attempt FROM task WHERE job_id = '{job.id}'"
    )
    assert attempts == [("cancelled", 1)], timeline
    assert done.progress.rows_loaded == 0  # the rolled-back rows never landed


async def test_cancel_during_the_load_rolls_the_destination_back(
    client_for: Any, databases: tuple[str, str], database_url: str
) -> None:
    await cancel_mid_load(client_for, databases, database_url, S.PHASE_LOAD, direct_max_rows=0)


async def test_cancel_during_a_direct_copy_rolls_the_destination_back(
    client_for: Any, databases: tuple[str, str], database_url: str
) -> None:
    await cancel_mid_load(
        client_for, databases, database_url, S.PHASE_DIRECT, direct_max_rows=10_000_000
    )


@contextlib.asynccontextmanager
async def table_locked(url: str, table: str) -> AsyncIterator[None]:
    """Holds `table` locked, with the database's lock_timeout short: every
    load into it fails with 55P03 (lock not available), a transient error."""
    conn = await asyncpg.connect(url)
    try:
        database = postgres_config(url)["database"]
        await conn.execute(f"ALTER DATABASE \"{database}\" SET lock_timeout = '50ms'")
        async with conn.transaction():
            await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            yield
    finally:
        await conn.close()


async def test_a_failing_destination_fails_the_run_with_its_message_after_the_last_attempt(
    client_for: Any, databases: tuple[str, str], database_url: str
) -> None:
    source, destination = databases
    await fill(source, "items", 50)
    await fill(destination, "items", 0)
    _, client = await client_for(direct_max_rows=0)
    async with table_locked(destination, "items"):  # a transient failure, every attempt
        job = await client.submit_run(await pipeline(client, source, destination))
        await client.wait_for_job(job.id)
    done = await client.get_job(job.id)

    assert done.state == S.JOB_STATE_FAILED
    assert done.error_message.startswith("runtime migrate: ")
    assert "lock timeout" in done.error_message
    attempts = await fetch(
        database_url, f"SELECT attempt, max_attempts FROM task WHERE job_id = '{job.id}'"
    )
    assert attempts == [(3, 3)]
    # Every retry resumed at load: the source was extracted once.
    events = [e.message async for e in client.job_events(job.id)]
    assert sum("Staged" in m for m in events) == 1
    assert sum("Resuming at load" in m for m in events) == 2, "\n".join(events)


async def test_a_duplicate_key_under_append_fails_the_run_at_once_saying_what_to_do(
    client_for: Any, databases: tuple[str, str], database_url: str
) -> None:
    source, destination = databases
    await fill(source, "items", 50)
    _, client = await client_for()
    pipeline_id = await pipeline(client, source, destination)
    first = await client.submit_run(pipeline_id)
    await client.wait_for_job(first.id)
    assert (await client.get_job(first.id)).state == S.JOB_STATE_SUCCEEDED

    again = await client.submit_run(pipeline_id)  # append the same keys again
    await client.wait_for_job(again.id)
    done = await client.get_job(again.id)

    assert done.state == S.JOB_STATE_FAILED
    assert done.error_message.startswith("runtime migrate: ")
    assert "use write_mode upsert or overwrite, or clear the table" in done.error_message
    attempts = await fetch(
        database_url, f"SELECT attempt, max_attempts FROM task WHERE job_id = '{again.id}'"
    )
    assert attempts == [(1, 3)]
    assert await fetch(destination, "SELECT count(*) FROM items") == [(50,)]


async def test_a_transient_failure_is_retried_and_the_run_succeeds(
    client_for: Any, databases: tuple[str, str], database_url: str
) -> None:
    source, destination = databases
    await fill(source, "items", 50)
    await fill(destination, "items", 0)
    conn = await asyncpg.connect(destination)
    try:  # the first load into items fails with a serialization failure (40001)
        await conn.execute(
            """
            CREATE SEQUENCE loads;
            CREATE FUNCTION first_load_fails() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                -- nextval is not rolled back with the load: only the first one fails
                IF nextval('loads') = 1 THEN
                    RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001';
                END IF;
                RETURN NULL;
            END $$;
            CREATE TRIGGER first_load_fails BEFORE INSERT ON items
                FOR EACH STATEMENT EXECUTE FUNCTION first_load_fails();
            """
        )
    finally:
        await conn.close()
    _, client = await client_for()
    job = await client.submit_run(await pipeline(client, source, destination))
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)

    assert done.state == S.JOB_STATE_SUCCEEDED, done.error_message
    attempts = await fetch(database_url, f"SELECT attempt FROM task WHERE job_id = '{job.id}'")
    assert attempts == [(2,)]
    events = [e.message async for e in client.job_events(job.id)]
    assert any("could not serialize access" in m and "retrying" in m for m in events), events
    query = "SELECT * FROM items ORDER BY id"
    assert await fetch(destination, query) == await fetch(source, query)


async def test_a_run_cancelled_while_pending_is_never_started(
    client_for: Any, databases: tuple[str, str], database_url: str
) -> None:
    source, destination = databases
    await fill(source, "items", 10)
    _, idle = await client_for(worker_concurrency=0)  # nobody leases
    pipeline_id = await pipeline(idle, source, destination)
    job = await idle.submit_run(pipeline_id)
    assert job.state == S.JOB_STATE_PENDING
    cancelled = await idle.cancel_job(job.id)
    assert cancelled.state == S.JOB_STATE_CANCELLED

    _, busy = await client_for()  # a worker now; it must find nothing to do
    other = await busy.submit_run(pipeline_id)
    await busy.wait_for_job(other.id)
    assert (await busy.get_job(other.id)).state == S.JOB_STATE_SUCCEEDED
    job_after = await busy.get_job(job.id)
    assert job_after.state == S.JOB_STATE_CANCELLED and job_after.started_at is None
    states = await fetch(database_url, f"SELECT state FROM task WHERE job_id = '{job.id}'")
    assert states == [("cancelled",)]


async def test_a_dry_run_plans_without_moving_data(
    client_for: Any, databases: tuple[str, str]
) -> None:
    source, destination = databases
    await fill(source, "items", 10)
    _, client = await client_for()
    job = await client.submit_run(await pipeline(client, source, destination), dry_run=True)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    assert done.state == S.JOB_STATE_SUCCEEDED, done.error_message
    assert done.result["dry_run"] is True
    # Named as the run's outputs name them: qualified by the source's schema.
    assert [s["stream"] for s in done.result["streams"]] == ["public.items"]
    assert await fetch(destination, "SELECT to_regclass('items')") == [(None,)]


async def test_a_dry_run_quotes_no_resolved_secret(
    client_for: Any,
    databases: tuple[str, str],
    tenant: Tenant,
    database_url: str,
    tmp_path: Path,
) -> None:
    """The destination's database name is a secret: the dry run's test of the
    destination must not carry it into events, results or any table."""
    source, destination = databases
    await fill(source, "items", 10)
    secret_name = postgres_config(destination)["database"]
    secrets = tmp_path / "secrets.json"
    secrets.write_text(
        json.dumps({"workspaces": {str(tenant.workspace_id): {"DST_DB": secret_name}}})
    )
    _, client = await client_for(secrets_file=str(secrets))
    src = await client.create_connection("source", "postgres", postgres_config(source))
    config = postgres_config(destination) | {"database": {"$secret": "DST_DB"}}
    dst = await client.create_connection("destination", "postgres", config)
    created = await client.create_pipeline("copy", src.id, dst.id)
    job = await client.submit_run(str(created.id), dry_run=True)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    assert done.state == S.JOB_STATE_SUCCEEDED, done.error_message

    events = [e async for e in client.job_events(job.id)]
    assert events and not [e.message for e in events if secret_name in e.message]
    assert secret_name not in str(done)
    conn = await asyncpg.connect(database_url)
    try:
        tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        for (table,) in tables:
            rows = await conn.fetch(f'SELECT t::text AS row FROM "{table}" t')
            assert not [r["row"] for r in rows if secret_name in r["row"]], table
    finally:
        await conn.close()


async def test_a_repeated_idempotency_key_answers_the_first_run(
    client_for: Any, databases: tuple[str, str]
) -> None:
    source, destination = databases
    await fill(source, "items", 10)
    _, client = await client_for(worker_concurrency=0)
    pipeline_id = await pipeline(client, source, destination)
    first = await client.submit_run(pipeline_id, idempotency_key="nightly-2026-11-30")
    again = await client.submit_run(pipeline_id, idempotency_key="nightly-2026-11-30")
    assert again.id == first.id
