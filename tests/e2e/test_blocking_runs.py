"""dedupe and aggregate through the real server, SDK and providers (cloud →
cloud, staged in many parts): the destination holds what DISTINCT ON and
GROUP BY, written here by hand over the source, return. And the operators
are refused at create and update time, naming the operator and its field,
with the message a dry run gives."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import InvalidArgument, JobState, SetuClient
from setu_client._proto.setu.v1 import common_pb2
from tests.databases import postgres_config

pytestmark = pytest.mark.slow

ACCOUNTS = ["acme", "globex", None, "initech", "umbrella"]
ROWS = [
    (
        i,
        ACCOUNTS[i % 5],
        # Distinct per account (no ties: ties are the integration tests');
        # every 11th row has no time, and loses to any row that has one.
        None if i % 11 == 0 else datetime(2024, 1, 1, tzinfo=UTC) + timedelta(minutes=i * 7 % 97),
        None if i % 13 == 0 else Decimal(i % 23) + Decimal("0.5"),
    )
    for i in range(1, 301)
]


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    return {
        "data_dir": tmp_path / "server",
        "batch_rows": 16,  # many parts and batches per stream
        "direct_max_rows": 0,  # staged
        "task_retry_backoff_seconds": 0.05,
    }


async def make_source(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE events (id bigint PRIMARY KEY, account text, "
            "at timestamptz, amount numeric(8, 2))"
        )
        await conn.copy_records_to_table("events", records=ROWS)
    finally:
        await conn.close()


async def fetch(url: str, sql: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return sorted((tuple(r) for r in await conn.fetch(sql)), key=repr)
    finally:
        await conn.close()


DEDUPE = {"op": "dedupe", "keys": ["account"], "order_by": "at"}
DEDUPE_SQL = (
    "SELECT DISTINCT ON (account) id, account, at, amount FROM events "
    "ORDER BY account, at DESC NULLS LAST"
)
AGGREGATE = {
    "op": "aggregate",
    "group_by": ["account"],
    "metrics": {
        "events": {"count": "*"},
        "total": {"sum": "amount"},
        "first_at": {"min": "at"},
        "last_at": {"max": "at"},
    },
}
AGGREGATE_SQL = (
    "SELECT account, count(*), min(at), max(at), sum(amount) FROM events GROUP BY account"
)


async def run(client: SetuClient, source_url: str, destination: dict[str, Any], op: Any) -> Any:
    src = await client.create_connection("src", "postgres", postgres_config(source_url))
    dst = await client.create_connection("dst", destination["provider"], destination["config"])
    pipeline = await client.create_pipeline(
        "p", src.id, dst.id, streams=["events"], spec={"operators": [op]}
    )
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    return await client.get_job(job.id)


@pytest.mark.parametrize(("op", "hand_sql"), [(DEDUPE, DEDUPE_SQL), (AGGREGATE, AGGREGATE_SQL)])
async def test_postgres_destination_holds_what_the_hand_written_sql_returns(
    client: SetuClient, databases: tuple[str, str], op: Any, hand_sql: str
) -> None:
    source_url, destination_url = databases
    await make_source(source_url)
    destination = {"provider": "postgres", "config": postgres_config(destination_url)}

    job = await run(client, source_url, destination, op)

    assert job.state == common_pb2.JOB_STATE_SUCCEEDED, job.error_message
    landed = await fetch(destination_url, "SELECT * FROM events")
    assert landed == await fetch(source_url, hand_sql)
    assert len(landed) == len(ACCOUNTS)
    outputs = await client.job_outputs(job.id)
    assert [(o.rows_extracted, o.rows_loaded) for o in outputs.streams] == [(300, 5)]


@pytest.mark.parametrize(("op", "hand_sql"), [(DEDUPE, DEDUPE_SQL), (AGGREGATE, AGGREGATE_SQL)])
async def test_file_destination_holds_what_the_hand_written_sql_returns(
    client: SetuClient, databases: tuple[str, str], tmp_path: Path, op: Any, hand_sql: str
) -> None:
    """A destination written row by row in Python: the accumulators' path."""
    source_url, _ = databases
    await make_source(source_url)
    folder = tmp_path / "out"
    folder.mkdir()
    destination = {"provider": "file", "config": {"url": str(folder), "format": "jsonl"}}

    job = await run(client, source_url, destination, op)

    assert job.state == common_pb2.JOB_STATE_SUCCEEDED, job.error_message
    lines = (folder / "events.jsonl").read_text().splitlines()
    landed = sorted((tuple(json.loads(line).values()) for line in lines), key=repr)
    expected = [tuple(_as_json(v) for v in row) for row in await fetch(source_url, hand_sql)]
    assert sorted(landed, key=repr) == sorted(expected, key=repr)


def _as_json(value: Any) -> Any:
    """How the jsonl writer spells a value."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value) if value != value.to_integral() else json.loads(str(value))
    return value


@pytest.fixture
async def ends(client: SetuClient, databases: tuple[str, str]) -> tuple[str, str]:
    source_url, destination_url = databases
    await make_source(source_url)
    src = await client.create_connection("src", "postgres", postgres_config(source_url))
    dst = await client.create_connection("dst", "postgres", postgres_config(destination_url))
    return src.id, dst.id


async def create(client: SetuClient, ends: tuple[str, str], *ops: Any) -> Any:
    spec = {"operators": list(ops)}
    name = f"p{next(NAMES)}"
    return await client.create_pipeline(name, *ends, streams=["events"], spec=spec)


NAMES = itertools.count()


async def test_a_spec_shape_is_refused_naming_the_operator_and_field(
    client: SetuClient, ends: tuple[str, str]
) -> None:
    cases = [
        ({"op": "dedupe", "keys": []}, r"spec.operators\[0\].keys: must be a non-empty list"),
        (
            {"op": "dedupe", "keys": ["id"], "order": "newest"},
            r"spec.operators\[0\].order: one of asc, desc",
        ),
        ({"op": "aggregate", "metrics": {}}, r"spec.operators\[0\].metrics: must be a non-empty"),
        (
            {"op": "aggregate", "metrics": {"n": {"avg": "amount"}}},
            r"spec.operators\[0\].metrics.n: unknown metric 'avg'",
        ),
        (
            {"op": "aggregate", "metrics": {"n": {"count": "*", "sum": "id"}}},
            r"spec.operators\[0\].metrics.n: must be one of",
        ),
        (
            {"op": "aggregate", "group_by": ["id"], "metrics": {"id": {"count": "*"}}},
            r"spec.operators\[0\].metrics.id: 'id' is a group_by column already",
        ),
    ]
    for op, message in cases:
        with pytest.raises(InvalidArgument, match=message):
            await create(client, ends, op)


async def test_columns_are_checked_against_the_catalog_as_a_dry_run_does(
    client: SetuClient, ends: tuple[str, str]
) -> None:
    unknown_key = {"op": "dedupe", "keys": ["acount"], "order_by": "at"}
    accepted = await create(client, ends, {"op": "drop", "columns": ["amount"]}, unknown_key)
    job = await client.submit_run(accepted.id, dry_run=True)
    await client.wait_for_job(job.id)
    planned = await client.get_job(job.id)
    assert planned.state is JobState.FAILED and planned.plan is not None
    (at_run_time,) = planned.plan.incompatibilities
    assert "spec.operators[1].keys: unknown column 'acount'" in at_run_time

    await client.discover_streams(ends[0])
    with pytest.raises(InvalidArgument) as refused:
        await create(client, ends, {"op": "drop", "columns": ["amount"]}, unknown_key)
    assert at_run_time in str(refused.value)

    cases = [
        (
            {"op": "aggregate", "metrics": {"t": {"sum": "account"}}},
            r"spec.operators\[0\].metrics.t: cannot sum text column 'account'",
        ),
        (
            {"op": "aggregate", "group_by": ["acount"], "metrics": {"n": {"count": "*"}}},
            r"spec.operators\[0\].group_by: unknown column 'acount'",
        ),
        ({"op": "dedupe", "keys": ["id"]}, r"spec.operators\[0\].order_by: required"),
    ]
    for op, message in cases:
        with pytest.raises(InvalidArgument, match=message):
            await create(client, ends, op)
    # Two blocking operators in one stream's chain.
    with pytest.raises(InvalidArgument, match=r"spec.operators\[1\]: a stream's chain holds one"):
        await create(client, ends, DEDUPE, AGGREGATE)
    # An update is checked the same way.
    pipeline = await create(client, ends, DEDUPE)
    with pytest.raises(InvalidArgument, match=r"spec.operators\[0\].metrics.t: cannot sum"):
        await client.update_pipeline(
            pipeline.id, spec={"operators": [{"op": "aggregate", "metrics": {"t": {"sum": "at"}}}]}
        )
    # Per stream, like every operator: a chain for another stream is not this one's.
    other = {"op": "dedupe", "keys": ["nope"], "order_by": "x", "streams": ["other"]}
    assert (await create(client, ends, other, AGGREGATE)).id
