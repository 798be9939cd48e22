"""Staged data is deleted once its run has been over for the retention."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_client.clock import FakeClock
from tests.factories import Tenant, make_tenant
from tests.servers import in_process

S = common_pb2
HOUR = 3600.0


def staged(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


async def test_a_runs_staged_data_is_purged_after_the_retention_and_only_then(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant: Tenant = await make_tenant(pool)
    source = tmp_path / "source.db"
    db = sqlite3.connect(source)
    db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
    db.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"item {i}") for i in range(200)])
    db.commit()
    db.close()
    clock = FakeClock(datetime(2026, 11, 30, 12, 0, tzinfo=UTC))
    blobs = tmp_path / "server" / "blobs"
    settings = {
        "data_dir": tmp_path / "server",
        "direct_max_rows": 0,  # stage
        "batch_rows": 50,
        "staged_retention_hours": 24.0,
        "janitor_interval_seconds": HOUR * 1000,  # only the test's passes
    }
    async with (
        in_process(database_url, clock, **settings) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        src = await client.create_connection("src", "sqlite", {"path": str(source)})
        dst = await client.create_connection(
            "dst", "file", {"url": str(tmp_path / "out"), "format": "jsonl"}
        )
        pipeline = await client.create_pipeline("items", src.id, dst.id)
        job = await client.submit_run(pipeline.id)
        await client.wait_for_job(job.id)
        assert (await client.get_job(job.id)).state == S.JOB_STATE_SUCCEEDED
        waiting = await client.submit_run(pipeline.id, start=False)  # not over: kept
        kept = staged(blobs)
        assert "manifest.json" in kept and len(kept) == 5  # 4 parts and the manifest

        janitor = server.services.janitor
        clock.advance(23 * HOUR)
        assert (await janitor.run_once()).purged == []
        assert staged(blobs) == kept

        clock.advance(2 * HOUR)
        assert (await janitor.run_once()).purged == [uuid.UUID(job.id)]
        assert staged(blobs) == []
        assert (await janitor.run_once()).purged == []

    purged = await pool.fetch("SELECT id, staged_purged_at FROM job")
    assert {str(r["id"]): r["staged_purged_at"] is not None for r in purged} == {
        job.id: True,
        waiting.id: False,
    }
