"""`setu run --dry-run` reads a bounded sample of each stream (its first
rows, as the run reads them) through the pipeline's operator chain and the
declared column types, and reports the first value that would not fit as
the real run would fail on it; a clean sample says how many rows it checked
(setu_engine/movement/dry_run.py `sample`). A real `setu` process against
an in-process server and its cloud worker, SQLite → SQLite."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_server.server import Running
from tests.e2e.test_cli_data import setu
from tests.factories import make_tenant

# The reproducer of issue 25: `status` holds text, the spec declares it integer.
ORDERS = [(1, "7"), (2, "8"), (3, "shipped"), (4, "9")]
DECLARED = {"columns": {"orders": {"status": "integer"}}}


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    return {"data_dir": tmp_path / "server", "task_retry_backoff_seconds": 0.05}


@pytest.fixture
async def env(server: Running, pool: asyncpg.Pool, tmp_path: Path) -> dict[str, str]:
    tenant = await make_tenant(pool)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    env = base | {"SETU_SERVER": f"127.0.0.1:{server.port}", "SETU_API_KEY": tenant.api_key}
    with sqlite3.connect(tmp_path / "shop.db") as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT)")
        db.executemany("INSERT INTO orders VALUES (?, ?)", ORDERS)
    connections = [
        {"name": "shop", "provider": "sqlite", "config": {"path": str(tmp_path / "shop.db")}},
        {
            "name": "warehouse",
            "provider": "sqlite",
            "config": {"path": str(tmp_path / "warehouse.db"), "create": True},
        },
    ]
    code, _, err = await setu(
        "connections", "create", "-f", "-", env=env, stdin=json.dumps(connections)
    )
    assert code == 0, err
    return env


async def pipeline(env: dict[str, str], name: str, spec: dict[str, Any]) -> None:
    document = {
        "name": name,
        "source": "shop",
        "destination": "warehouse",
        "streams": ["orders"],
        "spec": spec,
    }
    code, _, err = await setu("pipelines", "create", "-f", "-", env=env, stdin=json.dumps(document))
    assert code == 0, err


async def test_a_text_value_declared_integer_fails_the_dry_run_as_it_fails_the_run(
    env: dict[str, str], tmp_path: Path
) -> None:
    await pipeline(env, "typed", DECLARED)

    code, out, _ = await setu("run", "typed", "--dry-run", env=env)

    assert code == 1, out  # the exit of a dry run that says the run would fail
    assert "checked the first 4 rows of orders (the stream had no more): row 3 would fail" in out
    assert "column status (declared integer), value 'shipped'" in out
    assert "dry run: the run would fail (1 incompatibility)" in out
    code, document_text, _ = await setu("run", "typed", "--dry-run", "--json", env=env)
    plan = json.loads(document_text)["job"]["result"]
    (stream,) = plan["streams"]
    fault = stream["sample"]["fault"]
    assert (fault["column"], fault["row"], fault["declared_type"]) == ("status", 3, "integer")
    assert fault["value"] == "'shipped'"
    # Nothing was written.
    assert not (tmp_path / "warehouse.db").exists() or _tables(tmp_path / "warehouse.db") == []

    code, out, _ = await setu("run", "typed", "--wait", "--json", env=env)

    ran = json.loads(out)["job"]
    assert code == 1 and ran["state"] == "JOB_STATE_FAILED", ran
    # The real run fails on the same value, in the words the dry run quoted.
    assert fault["error"] in ran["error_message"], (fault["error"], ran["error_message"])


async def test_a_clean_sample_says_how_many_rows_it_checked_and_the_plan_stays(
    env: dict[str, str],
) -> None:
    await pipeline(
        env, "renamed", {"operators": [{"op": "rename", "columns": {"status": "state"}}]}
    )

    code, out, err = await setu("run", "renamed", "--dry-run", env=env)

    assert code == 0, (out, err)
    assert "stream orders → orders" in out
    assert 'create table "orders"' in out
    assert any(line.split()[:4] == ["status", "→", "state", "text"] for line in out.splitlines())
    assert "checked the first 4 rows of orders (the stream had no more): every value fits" in out
    assert out.rstrip().endswith("dry run: nothing would stop the run; nothing was written")


@pytest.mark.server(dry_run_sample_rows=2)
async def test_the_sample_is_bounded_and_says_it_is_a_sample(env: dict[str, str]) -> None:
    await pipeline(env, "bounded", DECLARED)

    code, out, err = await setu("run", "bounded", "--dry-run", env=env)

    # The bad value sits at row 3: a sample of 2 rows does not reach it, and
    # says it checked only those, not that the run will succeed.
    assert code == 0, (out, err)
    assert "checked the first 2 rows of orders: every value fits" in out


async def test_a_row_the_filter_drops_does_not_fail_the_dry_run(env: dict[str, str]) -> None:
    spec = DECLARED | {"operators": [{"op": "filter", "where": "id != 3"}]}
    await pipeline(env, "filtered", spec)

    code, out, err = await setu("run", "filtered", "--dry-run", env=env)

    assert code == 0, (out, err)
    assert "checked the first 4 rows of orders (the stream had no more): every value fits" in out
    code, out, _ = await setu("run", "filtered", "--wait", env=env)
    assert code == 0, out  # and the real run agrees


def _tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
