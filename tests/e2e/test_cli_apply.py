"""`setu apply|delete -f` and `setu export`, run as real processes against an
in-process server: create, a second apply that changes nothing, updates,
dry runs, deletes, an export applied back, and bad files."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import yaml

from setu_server.server import Running
from tests.factories import make_tenant


async def setu(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setu_cli.main",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    assert b"Traceback" not in err, err.decode()
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def env(server: Running, pool: asyncpg.Pool) -> dict[str, str]:
    tenant = await make_tenant(pool)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    return base | {"SETU_SERVER": f"127.0.0.1:{server.port}", "SETU_API_KEY": tenant.api_key}


def declared(tmp_path: Path) -> dict[str, Any]:
    return {
        "connections": [
            {"name": "crm", "provider": "sqlite", "config": {"path": str(tmp_path / "crm.db")}},
            {
                "name": "warehouse",
                "provider": "sqlite",
                "config": {"path": str(tmp_path / "dw.db"), "create": True},
            },
        ],
        "pipelines": [
            {
                "name": "crm-to-warehouse",
                "source": "crm",
                "destination": "warehouse",
                "streams": ["customers"],
            }
        ],
    }


def write(path: Path, *documents: Any) -> str:
    path.write_text(yaml.safe_dump_all(documents))
    return str(path)


async def pipeline(env: dict[str, str]) -> dict[str, Any]:
    code, out, _ = await setu("pipelines", "get", "crm-to-warehouse", "--json", env=env)
    assert code == 0
    found: dict[str, Any] = json.loads(out)
    return found


async def test_apply_creates_then_a_second_apply_changes_nothing(
    env: dict[str, str], tmp_path: Path
) -> None:
    # A folder holding the README's two shapes: a list of connections, one pipeline.
    folder = tmp_path / "setu"
    folder.mkdir()
    document = declared(tmp_path)
    write(folder / "connections.yaml", document["connections"])
    (folder / "pipeline.json").write_text(json.dumps(document["pipelines"][0]))

    code, out, err = await setu("apply", "-f", str(folder), env=env)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "+ connection crm",
        "+ connection warehouse",
        "+ pipeline crm-to-warehouse",
    ]
    made = await pipeline(env)
    assert made["streams"] == ["customers"] and made["write_mode"] == "WRITE_MODE_APPEND"

    code, out, _ = await setu("apply", "-f", str(folder), "--json", env=env)
    assert code == 0
    plan = json.loads(out)
    assert plan["applied"] is False
    assert {c["action"] for c in plan["changes"]} == {"unchanged"}
    assert (await pipeline(env))["updated_at"] == made["updated_at"]


async def test_apply_updates_what_changed_and_a_dry_run_changes_nothing(
    env: dict[str, str], tmp_path: Path
) -> None:
    document = declared(tmp_path)
    path = write(tmp_path / "setu.yaml", document)
    assert (await setu("apply", "-f", path, env=env))[0] == 0

    document["connections"][1]["config"]["create"] = False
    document["pipelines"][0]["write_mode"] = "upsert"
    document["pipelines"][0]["spec"] = {"primary_key": {"customers": ["id"]}}
    write(tmp_path / "setu.yaml", document)
    expected = [
        "= connection crm (unchanged)",
        "~ connection warehouse: config.create: true → false",
        "~ pipeline crm-to-warehouse: spec.primary_key: (none) → "
        '{"customers": ["id"]}; write_mode: append → upsert',
    ]

    code, out, _ = await setu("apply", "-f", path, "--dry-run", env=env)
    assert code == 0 and out.splitlines() == [*expected, "dry run: nothing changed"]
    assert (await pipeline(env))["write_mode"] == "WRITE_MODE_APPEND"

    code, out, _ = await setu("apply", "-f", path, env=env)
    assert code == 0 and out.splitlines() == expected
    after = await pipeline(env)
    assert after["write_mode"] == "WRITE_MODE_UPSERT"
    assert after["spec"] == {"primary_key": {"customers": ["id"]}}
    code, out, _ = await setu("connections", "get", "warehouse", "--json", env=env)
    assert json.loads(out)["config"]["create"] is False

    code, out, _ = await setu("apply", "-f", path, env=env)
    assert {line[0] for line in out.splitlines()} == {"="}


async def test_delete_removes_what_the_file_declares_then_reports_it_missing(
    env: dict[str, str], tmp_path: Path
) -> None:
    # Two YAML documents in one file.
    document = declared(tmp_path)
    path = write(
        tmp_path / "setu.yaml", {"pipelines": document["pipelines"]}, document["connections"]
    )
    code, out, _ = await setu("apply", "-f", path, env=env)
    assert code == 0 and len(out.splitlines()) == 3

    code, out, _ = await setu("delete", "-f", path, "--dry-run", env=env)
    assert code == 0 and out.splitlines()[-1] == "dry run: nothing deleted"
    code, out, _ = await setu("delete", "-f", path, "--dry-run", "--json", env=env)
    dry = json.loads(out)
    assert dry["deleted"] is False and {o["found"] for o in dry["objects"]} == {True}
    assert (await pipeline(env))["name"] == "crm-to-warehouse"

    code, out, _ = await setu("delete", "-f", path, env=env)
    assert code == 0
    # The pipeline first: a connection a pipeline uses cannot be deleted.
    assert out.splitlines() == [
        "- pipeline crm-to-warehouse",
        "- connection crm",
        "- connection warehouse",
    ]
    code, out, _ = await setu("connections", "list", "--json", env=env)
    assert json.loads(out)["connections"] == []

    code, out, _ = await setu("delete", "-f", path, env=env)
    assert code == 0
    assert out.splitlines() == [
        "= pipeline crm-to-warehouse (not found)",
        "= connection crm (not found)",
        "= connection warehouse (not found)",
    ]


async def test_export_then_apply_is_a_no_op(env: dict[str, str], tmp_path: Path) -> None:
    document = declared(tmp_path)
    document["connections"].append(
        {
            "name": "billing",
            "provider": "postgres",
            "config": {
                "host": "db.internal",
                "database": "billing",
                "user": "loader",
                "password": {"$secret": "BILLING_PASSWORD"},
            },
        }
    )
    document["pipelines"][0] |= {"write_mode": "merge", "paused": True, "schedule": "0 * * * *"}
    code, _, err = await setu("apply", "-f", write(tmp_path / "setu.yaml", document), env=env)
    assert code == 0, err

    code, out, _ = await setu("export", env=env)
    assert code == 0
    exported = yaml.safe_load(out)
    # By name, as the workspace lists them; references stay references; no ids or timestamps.
    document["connections"].sort(key=lambda c: c["name"])
    assert exported == document
    (tmp_path / "x.yaml").write_text(out)
    code, out, _ = await setu("apply", "-f", str(tmp_path / "x.yaml"), env=env)
    assert code == 0 and {line[0] for line in out.splitlines()} == {"="}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["connections"][0].update(host="x"),
            "setu.yaml: connection crm: unknown key(s) host",
        ),
        (  # refused by the server, still named by the entry
            lambda d: d["connections"][0]["config"].update(hosts="x"),
            "setu.yaml: connection crm: config: unknown key(s) hosts",
        ),
        (
            lambda d: d["pipelines"][0].update(source="crmm"),
            "setu.yaml: pipeline crm-to-warehouse: source 'crmm' is no connection",
        ),
    ],
)
async def test_a_bad_file_fails_in_one_line_naming_the_file_and_the_entry(
    env: dict[str, str], tmp_path: Path, change: Any, message: str
) -> None:
    document = declared(tmp_path)
    change(document)
    path = write(tmp_path / "setu.yaml", document)
    code, _, err = await setu("apply", "-f", path, env=env)
    assert code == 2
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: {tmp_path / message}")
    code, out, _ = await setu("connections", "list", "--json", env=env)
    assert json.loads(out)["connections"] == []  # nothing was applied


async def test_a_file_that_is_not_yaml_fails_in_one_line(
    env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "setu.yaml"
    path.write_text("connections:\n  - name: crm\n   provider: [sqlite\n")
    code, out, err = await setu("apply", "-f", str(path), env=env)
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {path}: not valid YAML")


# ---------------------------------------------------------------- the plan tells the truth


def _crm(tmp_path: Path) -> None:
    """The declared crm file, with the tables a discovery finds."""
    import sqlite3

    with sqlite3.connect(tmp_path / "crm.db") as db:
        db.execute("CREATE TABLE IF NOT EXISTS customers (id INTEGER PRIMARY KEY, name TEXT)")


async def _connections(env: dict[str, str]) -> list[Any]:
    code, out, _ = await setu("connections", "list", "--json", env=env)
    assert code == 0
    found: list[Any] = json.loads(out)["connections"]
    return found


BAD_FILES = {
    # the issue's three reproducers, then the rest of the corpus' kinds
    "unknown config key": lambda d: d["connections"][1]["config"].update(colour="blue"),
    "provider postgresql": lambda d: d["connections"][1].update(provider="postgresql"),
    "stream the catalog lacks": lambda d: d["pipelines"][0].update(streams=["custmers"]),
    "stream twice": lambda d: d["pipelines"][0].update(streams=["customers", "customers"]),
    "unknown operator": lambda d: d["pipelines"][0].update(spec={"operators": [{"op": "x"}]}),
    "bad schedule": lambda d: d["pipelines"][0].update(schedule="61 * * * *"),
    "no such agent id": lambda d: d["connections"][1].update(
        placement="agent", agent="4f154cbd-0000-4000-8000-000000000000"
    ),
}


async def _rows(pool: asyncpg.Pool) -> list[Any]:
    rows = await pool.fetch("SELECT to_jsonb(c) AS r FROM connection c ORDER BY id")
    rows += await pool.fetch("SELECT to_jsonb(p) AS r FROM pipeline p ORDER BY id")
    return [r["r"] for r in rows]


async def test_a_dry_run_refuses_what_apply_refuses_with_the_same_words(
    env: dict[str, str], tmp_path: Path, pool: asyncpg.Pool
) -> None:
    # crm exists and was discovered, so the catalog can judge the streams.
    _crm(tmp_path)
    only_crm = {"connections": declared(tmp_path)["connections"][:1]}
    assert (await setu("apply", "-f", write(tmp_path / "crm.yaml", only_crm), env=env))[0] == 0
    assert (await setu("connections", "discover", "crm", env=env))[0] == 0
    before = await _rows(pool)
    for case, change in BAD_FILES.items():
        document = declared(tmp_path)
        change(document)
        path = write(tmp_path / "setu.yaml", document)

        planned = await setu("apply", "-f", path, "--dry-run", env=env)
        assert await _rows(pool) == before, case
        applied = await setu("apply", "-f", path, env=env)
        assert await _rows(pool) == before, f"{case}: nothing is written when anything is refused"

        assert planned[0] == applied[0] == 2, case
        assert planned[2] == applied[2], case
        assert planned[2].startswith(f"error: {path}: ") and len(planned[2].splitlines()) == 1
        said = planned[1].splitlines()[-1]
        assert said.startswith("dry run: 1 of 2 change(s) refused") and "nothing changed" in said
        said = applied[1].splitlines()[-1]
        assert said.startswith("nothing was applied: 1 of 2 change(s) refused"), case


async def test_a_good_and_a_bad_connection_create_nothing(
    env: dict[str, str], tmp_path: Path
) -> None:
    document = {
        "connections": [
            {"name": "good-one", "provider": "sqlite", "config": {"path": "/tmp/good.db"}},
            {"name": "bad-one", "provider": "sqlite", "config": {"path": "/tmp/b.db", "x": 1}},
        ]
    }
    path = write(tmp_path / "setu.yaml", document)
    code, out, err = await setu("apply", "-f", path, env=env)
    assert code == 2
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: {path}: connection bad-one: config: unknown key(s) x")
    assert out.splitlines() == [
        "+ connection good-one",
        "+ connection bad-one",
        "nothing was applied: 1 of 2 change(s) refused",
    ]
    assert await _connections(env) == []


async def test_a_pipeline_of_new_connections_is_judged_before_anything_is_written(
    env: dict[str, str], tmp_path: Path
) -> None:
    document = declared(tmp_path)
    document["pipelines"][0]["spec"] = {"operators": [{"op": "teleport"}]}
    path = write(tmp_path / "setu.yaml", document)
    for dry in (["--dry-run"], []):
        code, _, err = await setu("apply", "-f", path, *dry, env=env)
        assert code == 2
        assert err.startswith(f"error: {path}: pipeline crm-to-warehouse: ")
        assert "teleport" in err
    assert await _connections(env) == []

    # A pipeline whose new connection is refused is not checked, and says so.
    document = declared(tmp_path)
    document["connections"][0]["config"]["colour"] = "blue"
    code, out, err = await setu("apply", "-f", write(tmp_path / "setu.yaml", document), env=env)
    assert code == 2 and len(err.splitlines()) == 1 and "connection crm: " in err
    assert out.splitlines()[-1] == (
        "nothing was applied: 1 of 3 change(s) refused; not checked: "
        "pipeline crm-to-warehouse (its connection crm is refused)"
    )


# ---------------------------------------------------------------- agents by name


async def test_agents_by_name_in_the_file_and_in_the_export(
    env: dict[str, str], tmp_path: Path, server: Running, pool: asyncpg.Pool
) -> None:
    from setu_client.clock import SystemClock
    from setu_server.service.admin import AdminService

    (workspace,) = {r["workspace_id"] for r in await pool.fetch("SELECT workspace_id FROM agent")}
    edge = (await AdminService(pool, SystemClock()).create_agent(workspace, "edge-1")).value
    document = declared(tmp_path)
    document["connections"][0] |= {"placement": "agent", "agent": "edge-1"}
    document["connections"][1] |= {"placement": "agent", "agent_id": "edge-1"}  # the older key
    code, out, err = await setu("apply", "-f", write(tmp_path / "setu.yaml", document), env=env)
    assert code == 0, err
    assert {c["agent_id"] for c in await _connections(env)} == {str(edge.id)}

    code, out, _ = await setu("export", env=env)
    exported = yaml.safe_load(out)
    assert [c.get("agent") for c in exported["connections"]] == ["edge-1", "edge-1"]
    assert str(edge.id) not in out
    code, out, _ = await setu("apply", "-f", write(tmp_path / "x.yaml", exported), env=env)
    assert code == 0 and {line[0] for line in out.splitlines()} == {"="}

    # `connections create -f` reads an agent the same way.
    one = {"name": "edge-db", "provider": "sqlite", "config": {"path": "/tmp/edge.db"}}
    one |= {"placement": "agent", "agent": "edge-1"}
    path = write(tmp_path / "one.yaml", one)
    code, out, err = await setu("connections", "create", "-f", path, "--json", env=env)
    assert code == 0, err
    assert json.loads(out)["agent_id"] == str(edge.id)
    # and so does `connections update --set`.
    code, out, err = await setu(
        "connections", "update", "edge-db", "--set", "agent_id=edge-1", "--json", env=env
    )
    assert code == 0, err
    assert json.loads(out)["agent_id"] == str(edge.id)

    document["connections"][0]["agent"] = "edge-2"
    code, _, err = await setu("apply", "-f", write(tmp_path / "setu.yaml", document), env=env)
    assert code == 2
    assert err.strip() == (
        f"error: {tmp_path / 'setu.yaml'}: connection crm: agent 'edge-2' is no agent of "
        "this workspace (its agents: edge-1, test agent)"
    )


async def test_a_name_taken_again_after_a_deactivation_names_the_active_agent(
    env: dict[str, str], tmp_path: Path, pool: asyncpg.Pool
) -> None:
    """A host that replaced a deactivated agent registers under its name
    again: the file's `agent: edge-1` is the active one, and export writes
    it by name (the deactivated one alone reads by id)."""
    from setu_client.clock import SystemClock
    from setu_server.service.admin import AdminService

    (workspace,) = {r["workspace_id"] for r in await pool.fetch("SELECT workspace_id FROM agent")}
    admin = AdminService(pool, SystemClock())
    old = (await admin.create_agent(workspace, "edge-1")).value
    await admin.deactivate_agent(old.id)
    new = (await admin.create_agent(workspace, "edge-1")).value
    document = declared(tmp_path)
    document["connections"][0] |= {"placement": "agent", "agent": "edge-1"}
    code, _, err = await setu("apply", "-f", write(tmp_path / "setu.yaml", document), env=env)
    assert code == 0, err
    placed = {c["name"]: c["agent_id"] for c in await _connections(env)}
    assert placed["crm"] == str(new.id)

    code, out, _ = await setu("export", env=env)
    exported = yaml.safe_load(out)
    assert [c.get("agent") for c in exported["connections"]][:1] == ["edge-1"], out
    code, out, _ = await setu("apply", "-f", write(tmp_path / "x.yaml", exported), env=env)
    assert code == 0 and {line[0] for line in out.splitlines()} == {"="}


# ---------------------------------------------------------------- a write lost midway


async def test_a_write_refused_midway_says_what_was_applied_and_how_to_finish(
    env: dict[str, str], tmp_path: Path, server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    """Validation passes; then, before the second write, another client
    creates a connection of the same name: the apply stops there and says
    what it applied, what it did not, and that applying again finishes it."""
    import argparse

    from setu_cli.apply import apply_command
    from setu_cli.session import Session
    from setu_client import SetuClient

    class Racing(SetuClient):
        async def create_connection(self, name: str, *args: Any, **kwargs: Any) -> Any:
            if name == "warehouse" and not kwargs.get("validate_only"):
                async with SetuClient(self_target, env["SETU_API_KEY"]) as rival:
                    await rival.create_connection(name, "sqlite", {"path": "/tmp/rival.db"})
            return await super().create_connection(name, *args, **kwargs)

    self_target = env["SETU_SERVER"]
    path = write(tmp_path / "setu.yaml", declared(tmp_path))
    args = argparse.Namespace(file=path, dry_run=False, json=False)
    async with Racing(self_target, env["SETU_API_KEY"]) as client:
        code = await apply_command(client, args, Session())
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"error: {path}: connection warehouse: a connection named 'warehouse' already exists "
        "in this workspace",
        "applied: connection crm",
        "not applied: connection warehouse, pipeline crm-to-warehouse",
        "apply changes only what differs from the workspace, so running it again finishes "
        f"the work: setu apply -f {path}",
    ]
