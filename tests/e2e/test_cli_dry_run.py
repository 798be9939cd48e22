"""`setu run --dry-run` waits for the plan, prints it readably and exits as
the real run would: 0 when nothing stops it, 1 listing every reason when
something would (a real process against an in-process server)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_server.server import Running
from tests.e2e.test_cli_data import connections_yaml, setu
from tests.factories import make_tenant


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    return {"data_dir": tmp_path / "server"}


@pytest.fixture
async def env(server: Running, pool: asyncpg.Pool, tmp_path: Path) -> dict[str, str]:
    tenant = await make_tenant(pool)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    env = base | {"SETU_SERVER": f"127.0.0.1:{server.port}", "SETU_API_KEY": tenant.api_key}
    await setu("connections", "create", "-f", str(connections_yaml(tmp_path)), env=env)
    return env


async def pipeline(env: dict[str, str], name: str, **fields: Any) -> None:
    spec = {"name": name, "source": "crm", "destination": "warehouse", "streams": ["users"]}
    code, _, err = await setu(
        "pipelines", "create", "-f", "-", env=env, stdin=json.dumps(spec | fields)
    )
    assert code == 0, err


async def test_a_dry_run_prints_its_plan_and_exits_zero(env: dict[str, str]) -> None:
    await pipeline(
        env, "plan-ok", spec={"operators": [{"op": "rename", "columns": {"name": "full_name"}}]}
    )

    code, out, err = await setu("run", "plan-ok", "--dry-run", env=env)

    assert code == 0, (out, err)
    assert "stream users → users" in out
    assert 'create table "users"' in out
    assert any(line.split()[:4] == ["name", "→", "full_name", "text"] for line in out.splitlines())
    assert out.rstrip().endswith("dry run: nothing would stop the run; nothing was written")


async def test_a_dry_run_that_would_fail_lists_why_and_exits_one(
    env: dict[str, str], tmp_path: Path
) -> None:
    with sqlite3.connect(tmp_path / "warehouse.db") as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name INTEGER)")
    await pipeline(env, "plan-bad", spec={"schema_evolution": "fail"})

    code, out, _ = await setu("run", "plan-bad", "--dry-run", env=env)

    assert code == 1, out
    assert "✗ stream users, column name" in out and "INTEGER → text" in out
    assert "dry run: the run would fail (1 incompatibility)" in out
    code, out, _ = await setu("run", "plan-bad", "--dry-run", "--json", env=env)
    document = json.loads(out)
    assert code == 1
    assert document["job"]["state"] == "JOB_STATE_FAILED"
    assert len(document["job"]["result"]["incompatibilities"]) == 1
