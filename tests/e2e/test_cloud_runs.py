"""cloud → cloud runs through the real server, SDK, providers and blob store:
every flow of the acceptance list under every write mode, with operators,
compared row for row with the transform computed here by hand."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_engine.staged.s3 import s3_client
from tests.databases import postgres_config, scratch_database
from tests.s3server import S3Endpoint

S = common_pb2

COLUMNS = ("id", "name", "email", "amount", "active", "created_at")
ROWS: list[tuple[Any, ...]] = [
    (
        i,
        f"name {i}",
        None if i % 17 == 0 else f"user{i}@example.com",
        Decimal(i * 7 % 50) + Decimal("0.25"),
        i % 3 != 0,
        datetime(2024, 1, 1, tzinfo=UTC) + timedelta(hours=i, microseconds=i),
    )
    for i in range(1, 121)
]

SPEC: dict[str, Any] = {
    "operators": [
        {"op": "rename", "columns": {"name": "full_name"}},
        {"op": "filter", "where": "amount >= 10 and active = true"},
        {"op": "hash", "columns": ["email"]},
        {"op": "drop", "columns": ["active"]},
        {"op": "constant", "column": "origin", "value": "crm"},
    ],
    "primary_key": {"users": ["id"]},
}

OUT = ("id", "full_name", "email", "amount", "created_at", "origin")


def transform(row: tuple[Any, ...]) -> dict[str, Any] | None:
    """SPEC, written out by hand."""
    id_, name, email, amount, active, created_at = row
    if not (amount >= 10 and active):
        return None
    digest = hashlib.sha256(email.encode()).hexdigest() if email is not None else None
    return {
        "id": id_,
        "full_name": name,
        "email": digest,
        "amount": amount,
        "created_at": created_at,
        "origin": "crm",
    }


def seed(id_: int, name: str) -> dict[str, Any]:
    return {
        "id": id_,
        "full_name": name,
        "email": None,
        "amount": Decimal("1.00"),
        "created_at": datetime(2020, 1, 1, tzinfo=UTC),
        "origin": "seed",
    }


# What the destination holds before the run: an extra key, and (where keys
# may clash) two keys the source also has.
SEEDS_EXTRA = [seed(1000, "kept unless replaced")]
SEEDS_OVERLAP = [seed(11, "stale eleven"), seed(13, "stale thirteen")]


def expected(mode: str) -> list[dict[str, Any]]:
    moved = [t for t in map(transform, ROWS) if t is not None]
    keys = {r["id"] for r in moved}
    if mode == "append":
        result = SEEDS_EXTRA + moved
    elif mode == "overwrite" or mode == "merge":
        result = moved
    else:  # upsert
        result = [s for s in SEEDS_EXTRA + SEEDS_OVERLAP if s["id"] not in keys] + moved
    return sorted(result, key=lambda r: r["id"])


def seeds(mode: str) -> list[dict[str, Any]]:
    return SEEDS_EXTRA if mode == "append" else SEEDS_EXTRA + SEEDS_OVERLAP


MODES = ["append", "overwrite", "upsert", "merge"]


@dataclass
class Flow:
    """A prepared source and destination, as connection configs, and a way to
    read the destination back."""

    source: tuple[str, dict[str, Any]]
    destination: tuple[str, dict[str, Any]]
    read_back: Callable[[], Awaitable[list[dict[str, Any]]]]


# -- sources -----------------------------------------------------------------


async def postgres_source(url: str) -> tuple[str, dict[str, Any]]:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE users (id bigint PRIMARY KEY, name text, email text, "
            "amount numeric(10, 2), active boolean, created_at timestamptz)"
        )
        await conn.copy_records_to_table("users", records=ROWS, columns=COLUMNS)
    finally:
        await conn.close()
    return "postgres", postgres_config(url)


def sqlite_source(path: Path) -> tuple[str, dict[str, Any]]:
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, email TEXT, "
        "amount NUMERIC, active BOOLEAN, created_at TIMESTAMPTZ)"
    )
    db.executemany(
        "INSERT INTO users VALUES (?, ?, ?, ?, ?, ?)",
        [(i, n, e, str(a), int(b), c.isoformat()) for i, n, e, a, b, c in ROWS],
    )
    db.commit()
    db.close()
    return "sqlite", {"path": str(path)}


async def s3_csv_source(s3: S3Endpoint, bucket: str) -> tuple[str, dict[str, Any]]:
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(COLUMNS)
    for i, n, e, a, b, c in ROWS:
        writer.writerow([i, n, e or "", a, "true" if b else "false", c.isoformat()])
    async with s3_client(s3.settings) as client:
        await client.put_object(Bucket=bucket, Key="crm/users.csv", Body=text.getvalue().encode())
    return "file", {
        "url": f"s3://{bucket}/crm/",
        "format": "csv",
        "endpoint_url": s3.endpoint_url,
        "region": s3.region,
        "access_key_id": s3.access_key_id,
        "secret_access_key": {"$secret": "S3_SECRET"},
        "columns": {
            "users": {
                "id": "bigint",
                "amount": "numeric",
                "active": "boolean",
                "created_at": "timestamptz",
            }
        },
    }


# -- destinations --------------------------------------------------------------


async def postgres_destination(
    url: str, mode: str
) -> tuple[tuple[str, dict[str, Any]], Callable[[], Awaitable[list[dict[str, Any]]]]]:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE users (id bigint PRIMARY KEY, full_name text, email text, "
            "amount numeric, created_at timestamptz, origin text)"
        )
        await conn.copy_records_to_table(
            "users", records=[tuple(s[c] for c in OUT) for s in seeds(mode)], columns=OUT
        )
    finally:
        await conn.close()

    async def read_back() -> list[dict[str, Any]]:
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch(f"SELECT {', '.join(OUT)} FROM users ORDER BY id")
        finally:
            await conn.close()
        return [dict(r) for r in rows]

    return ("postgres", postgres_config(url)), read_back


def jsonl_destination(
    folder: Path, mode: str
) -> tuple[tuple[str, dict[str, Any]], Callable[[], Awaitable[list[dict[str, Any]]]]]:
    folder.mkdir()
    with (folder / "users.jsonl").open("w") as out:
        for s in seeds(mode):
            out.write(json.dumps(s | {"amount": float(s["amount"])}, default=str) + "\n")

    async def read_back() -> list[dict[str, Any]]:
        rows = []
        for line in (folder / "users.jsonl").read_text().splitlines():
            row = json.loads(line, parse_float=Decimal)
            row["created_at"] = datetime.fromisoformat(row["created_at"])
            rows.append(row)
        return sorted(rows, key=lambda r: r["id"])

    return ("file", {"url": str(folder), "format": "jsonl"}), read_back


# -- the tests -------------------------------------------------------------------


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"S3_SECRET": "testing"}))
    return {
        "data_dir": tmp_path / "server",
        "secrets_file": str(secrets),
        "shared_secrets": "S3_SECRET",  # the test bucket's key, for every workspace
        "batch_rows": 32,  # several parts and batches per stream
        "direct_max_rows": 0,  # stage every run here; direct has its own test
        "task_retry_backoff_seconds": 0.05,
    }


async def run_pipeline(
    client: SetuClient,
    source: tuple[str, dict[str, Any]],
    destination: tuple[str, dict[str, Any]],
    mode: str,
    spec: dict[str, Any] | None = SPEC,
) -> Any:
    src = await client.create_connection("source", source[0], source[1])
    dst = await client.create_connection("destination", destination[0], destination[1])
    pipeline = await client.create_pipeline("users", src.id, dst.id, spec=spec, write_mode=mode)
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    return await client.get_job(job.id)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "flow", ["postgres→postgres", "sqlite→postgres", "s3 csv→postgres", "postgres→jsonl"]
)
async def test_a_cloud_run_lands_the_transformed_source_under_every_write_mode(
    client: SetuClient,
    pg_server_url: str,
    s3_endpoint: S3Endpoint,
    tmp_path: Path,
    flow: str,
    mode: str,
) -> None:
    async with (
        scratch_database(pg_server_url) as source_url,
        scratch_database(pg_server_url) as destination_url,
    ):
        if flow.startswith("postgres"):
            source = await postgres_source(source_url)
        elif flow.startswith("sqlite"):
            source = sqlite_source(tmp_path / "source.db")
        else:
            source = await s3_csv_source(s3_endpoint, await s3_endpoint.make_bucket())
        if flow.endswith("jsonl"):
            destination, read_back = jsonl_destination(tmp_path / "out", mode)
        else:
            destination, read_back = await postgres_destination(destination_url, mode)

        job = await run_pipeline(client, source, destination, mode)

        assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
        assert job.phase == S.PHASE_LOAD
        assert job.extract_runtime == "cloud" and job.load_runtime == "cloud"
        assert await read_back() == expected(mode)
        moved = len([t for t in map(transform, ROWS) if t is not None])
        outputs = await client.job_outputs(job.id)
        assert [(o.stream, o.rows_extracted, o.rows_loaded) for o in outputs.streams] == [
            (outputs.streams[0].stream, len(ROWS), moved)
        ]
