"""`setu connections update|test|discover|preview` and `setu pipelines
update`, run as real processes against an in-process server."""

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
from tests.servers import free_port


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    return {"data_dir": tmp_path / "server"}


@pytest.fixture
async def env(server: Running, pool: asyncpg.Pool) -> dict[str, str]:
    tenant = await make_tenant(pool)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    return base | {"SETU_SERVER": f"127.0.0.1:{server.port}", "SETU_API_KEY": tenant.api_key}


async def _json(*args: str, env: dict[str, str]) -> Any:
    code, out, err = await setu(*args, "--json", env=env)
    assert code == 0, err
    return json.loads(out)


async def test_connections_test_discover_and_preview(env: dict[str, str], tmp_path: Path) -> None:
    await setu("connections", "create", "-f", str(connections_yaml(tmp_path)), env=env)
    gone = {"name": "gone", "provider": "sqlite", "config": {"path": str(tmp_path / "no.db")}}
    await setu("connections", "create", "-f", "-", env=env, stdin=json.dumps(gone))

    code, out, _ = await setu("connections", "test", "crm", env=env)
    assert code == 0 and out.startswith("ok: ") and "tested on cloud" in out
    code, out, _ = await setu("connections", "test", "gone", env=env)
    assert code == 1 and out.startswith("failed: ") and "no SQLite database" in out
    code, out, _ = await setu("connections", "test", "gone", "--json", env=env)
    tested = json.loads(out)
    assert code == 1 and tested["ok"] is False and "no SQLite database" in tested["message"]

    code, out, _ = await setu("connections", "discover", "crm", env=env)
    header, row = out.splitlines()
    assert code == 0 and header.split()[:2] == ["STREAM", "COLUMNS"]
    assert row.split() == ["users", "2", "id", "50", "active"]
    found = await _json("connections", "discover", "crm", env=env)
    assert [s["name"] for s in found["streams"]] == ["users"]

    code, out, _ = await setu("connections", "preview", "crm", "users", "--limit", "2", env=env)
    assert code == 0 and [line.split() for line in out.splitlines()] == [
        ["id", "name"],
        ["1", "name", "1"],
        ["2", "name", "2"],
    ]
    preview = await _json("connections", "preview", "crm", "users", "--limit", "1", env=env)
    assert preview["rows"] == [{"id": 1, "name": "name 1"}]
    code, _, err = await setu("connections", "preview", "crm", "nope", env=env)
    assert code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1


async def test_updates_take_a_file_and_set_and_send_only_those_fields(
    env: dict[str, str], tmp_path: Path
) -> None:
    await setu("connections", "create", "-f", str(connections_yaml(tmp_path)), env=env)
    pipeline = {"name": "users-sync", "source": "crm", "destination": "warehouse"}
    await setu("pipelines", "create", "-f", "-", env=env, stdin=json.dumps(pipeline))

    # A dotted key changes one entry of config and keeps the others.
    other = tmp_path / "other.db"
    code, out, _ = await setu(
        "connections", "update", "warehouse", "--set", f"config.path={other}", env=env
    )
    assert code == 0 and out.startswith("updated connection warehouse (")
    warehouse = await _json("connections", "get", "warehouse", env=env)
    assert warehouse["config"] == {"path": str(other), "create": True}

    # From a file (JSON here), plus --set over it; YAML values: a list, a bool.
    changes = tmp_path / "changes.json"
    changes.write_text(json.dumps({"write_mode": "overwrite", "schedule": "0 * * * *"}))
    code, out, err = await setu(
        "pipelines",
        "update",
        "users-sync",
        "-f",
        str(changes),
        "--set",
        "streams=[users]",
        "--set",
        "paused=true",
        "--set",
        "spec.primary_key.users=[id]",
        env=env,
    )
    assert code == 0, err
    assert out.splitlines()[0].endswith(": write_mode, schedule, streams, paused, spec")
    updated = await _json("pipelines", "get", "users-sync", env=env)
    assert (updated["write_mode"], updated["schedule"], updated["paused"]) == (
        "WRITE_MODE_OVERWRITE",
        "0 * * * *",
        True,
    )
    assert updated["streams"] == ["users"]
    assert updated["spec"] == {"primary_key": {"users": ["id"]}}

    # Connections by name; the name itself may change.
    source = await _json("connections", "get", "warehouse", env=env)
    renamed = await _json(
        "pipelines",
        "update",
        "users-sync",
        "--set",
        "source=warehouse",
        "--set",
        "name=copy",
        env=env,
    )
    assert renamed["name"] == "copy" and renamed["source_connection_id"] == source["id"]
    assert renamed["write_mode"] == "WRITE_MODE_OVERWRITE"  # untouched fields stay

    for args, message in (
        (("pipelines", "update", "copy"), "nothing to change"),
        (("pipelines", "update", "copy", "--set", "colour=blue"), "unknown field(s) colour"),
        (("connections", "update", "crm", "--set", "novalue"), "expected key=value"),
        (("connections", "update", "crm", "--set", "placement=moon"), "placement must be"),
        (("pipelines", "update", "nope", "--set", "paused=true"), "no pipeline named 'nope'"),
    ):
        code, _, err = await setu(*args, env=env)
        assert code == 2 and err.startswith("error: ") and message in err, err
        assert len(err.splitlines()) == 1


async def test_an_update_file_is_read_as_create_reads_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    await setu("connections", "create", "-f", str(connections_yaml(tmp_path)), env=env)
    moved = tmp_path / "moved.db"
    with sqlite3.connect(moved) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    changes = tmp_path / "crm.yaml"
    changes.write_text(f'config: {{path: "{moved}"}}\n')
    updated = await _json("connections", "update", "crm", "-f", str(changes), env=env)
    assert updated["config"] == {"path": str(moved)}
    code, out, _ = await setu("connections", "discover", "crm", env=env)
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["t"]


async def test_waiting_on_a_ready_job_names_the_command_that_starts_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    await setu("connections", "create", "-f", str(connections_yaml(tmp_path)), env=env)
    pipeline = {"name": "users-sync", "source": "crm", "destination": "warehouse"}
    await setu("pipelines", "create", "-f", "-", env=env, stdin=json.dumps(pipeline))
    code, out, _ = await setu("run", "users-sync", "--no-start", env=env)
    ready = out.strip()
    assert code == 0
    code, _, err = await setu("jobs", "wait", ready, env=env)
    assert code == 2
    assert err.splitlines() == [
        f"error: job {ready} is READY and would never end: start it with `setu jobs start {ready}`"
    ]


async def test_server_options_and_json_are_taken_at_every_level(
    env: dict[str, str], tmp_path: Path
) -> None:
    await setu("connections", "create", "-f", str(connections_yaml(tmp_path)), env=env)
    bare = {k: v for k, v in env.items() if k not in ("SETU_SERVER", "SETU_API_KEY")}
    where = ("--server", env["SETU_SERVER"], "--api-key", env["SETU_API_KEY"])
    for args in (
        (*where, "--json", "connections", "list"),
        ("connections", *where, "--json", "list"),
        ("connections", "list", *where, "--json"),
        ("--json", "connections", *where, "list"),
    ):
        code, out, err = await setu(*args, env=bare)
        assert code == 0, (args, err)
        assert [c["name"] for c in json.loads(out)["connections"]] == ["crm", "warehouse"]
    code, out, _ = await setu("connections", "list", *where, env=bare)
    assert code == 0 and out.splitlines()[0].split()[0] == "NAME"  # no --json: a table


async def test_an_api_key_with_a_stray_newline_is_one_line_not_a_grpc_batch_error(
    env: dict[str, str],
) -> None:
    pasted = env | {"SETU_API_KEY": env["SETU_API_KEY"] + "\n"}
    code, _, err = await setu("connections", "list", env=pasted)
    assert code == 2
    assert err.splitlines() == [
        "error: the API key has characters a key never has (a stray space or newline?)"
    ]


async def test_waiting_on_an_unreachable_server_gives_up_like_any_other_command(
    env: dict[str, str],
) -> None:
    gone = env | {"SETU_SERVER": f"127.0.0.1:{free_port()}"}  # nothing listens here
    job_id = "6f1f7c59-2c4f-4d0c-9a53-6fbb8f0e8d11"
    for command in (("jobs", "wait", job_id), ("jobs", "get", job_id)):
        code, _, err = await setu(*command, env=gone)
        assert code == 2 and err.startswith(f"error: cannot reach {gone['SETU_SERVER']}: ")
        assert len(err.splitlines()) == 1
