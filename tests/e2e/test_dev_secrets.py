"""`setu dev secret set NAME`, and a dev server's secret set while it runs:
the cloud's refusal says what to run, and after the command the next task
has the secret, with no restart (the worker, a real process, re-reads the
file when it changes)."""

from __future__ import annotations

import asyncio
import json
import stat
import sys
from pathlib import Path

import asyncpg

from setu_client import SetuClient
from tests.databases import postgres_config
from tests.factories import make_tenant
from tests.servers import in_process


async def setu_dev_secret_set(
    name: str, value: str, data_dir: Path, *extra: str
) -> tuple[int, str, str]:
    """`setu dev secret set NAME` as a person runs it, the value on stdin."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setu_cli.main",
        "dev",
        "secret",
        "set",
        name,
        "--data-dir",
        str(data_dir),
        *extra,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(value.encode()), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_secret_set_while_the_server_runs_serves_the_next_test_connection(
    database_url: str, pg_server_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant = await make_tenant(pool)
    data_dir = tmp_path / "dev"
    data_dir.mkdir()
    (data_dir / "credentials.json").write_text(
        json.dumps({"workspace_id": str(tenant.workspace_id)})
    )
    secrets = data_dir / "secrets.json"
    secrets.write_text(json.dumps({"workspaces": {}}))
    config = postgres_config(pg_server_url) | {"user": {"$secret": "PG_USER"}}

    async with (
        in_process(database_url, secrets_file=str(secrets)) as server,
        SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client,
    ):
        conn = await client.create_connection("db", "postgres", config)
        refused = await client.test_connection(conn.id)
        assert not refused.ok
        assert refused.message.endswith(
            "secret 'PG_USER' is not in this workspace's cloud secrets: run "
            "`setu dev secret set PG_USER` (dev server), or add it under "
            f"workspaces.{tenant.workspace_id} in {secrets}"
        )

        user = postgres_config(pg_server_url)["user"]
        code, _, err = await setu_dev_secret_set("PG_USER", f"{user}\n", data_dir)
        assert code == 0, err
        answer = await client.test_connection(conn.id)

    assert answer.ok, answer.message


def dev_folder(tmp_path: Path, workspace: str = "0b6f3a1e-0000-4000-8000-00000000000a") -> Path:
    """A data folder as `setu dev` leaves it: its credentials name the dev workspace."""
    data_dir = tmp_path / "dev"
    data_dir.mkdir()
    (data_dir / "credentials.json").write_text(json.dumps({"workspace_id": workspace}))
    return data_dir


async def test_secret_set_writes_the_dev_section_privately_and_never_prints_the_value(
    tmp_path: Path,
) -> None:
    data_dir = dev_folder(tmp_path)
    code, out, err = await setu_dev_secret_set("WH_PASSWORD", "pa ss\u00e9\n", data_dir)
    assert (code, err) == (0, "")
    secrets = data_dir / "secrets.json"
    assert out == (
        f"secret WH_PASSWORD set for the dev workspace in {secrets}; "
        "a running `setu dev` uses it from its next task\n"
    )
    ws = "0b6f3a1e-0000-4000-8000-00000000000a"
    assert json.loads(secrets.read_text()) == {"workspaces": {ws: {"WH_PASSWORD": "pa ss\u00e9"}}}
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600

    # A second secret joins the first; a file given by flag is the one written.
    assert (await setu_dev_secret_set("CRM_USER", "crm", data_dir))[0] == 0
    assert json.loads(secrets.read_text())["workspaces"][ws] == {
        "WH_PASSWORD": "pa ss\u00e9",
        "CRM_USER": "crm",
    }
    other = tmp_path / "elsewhere.json"
    assert (await setu_dev_secret_set("X", "1", data_dir, "--secrets-file", str(other)))[0] == 0
    assert json.loads(other.read_text()) == {"workspaces": {ws: {"X": "1"}}}


async def test_secret_set_refuses_without_a_dev_workspace_a_bad_name_or_an_empty_value(
    tmp_path: Path,
) -> None:
    code, _, err = await setu_dev_secret_set("PW", "v", tmp_path)
    assert code == 1
    assert err == f"error: no dev workspace in {tmp_path}: start `setu dev` once, it creates it\n"

    data_dir = dev_folder(tmp_path)
    code, _, err = await setu_dev_secret_set("PW-1", "v", data_dir)
    assert (code, err) == (1, "error: 'PW-1': a secret name is letters, digits and underscores\n")
    code, _, err = await setu_dev_secret_set("PW", "\n", data_dir)
    assert (code, err) == (1, "error: an empty value for PW; nothing was written\n")
    assert not (tmp_path / "secrets.json").exists()
    assert not (data_dir / "secrets.json").exists()
