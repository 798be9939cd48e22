"""`setu admin …` against a running server; which commands each entry
point offers."""

from __future__ import annotations

import asyncio
import json
import sys

from tests.servers import ADMIN_TOKEN, in_process


async def _setu(*args: str, module: str = "setu_server.cli") -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_admin_commands_create_and_list(database_url: str) -> None:
    async with in_process(database_url) as server:
        common = ("admin", "--server", f"127.0.0.1:{server.port}", "--admin-token", ADMIN_TOKEN)
        code, out, _ = await _setu(*common, "workspace", "create", "acme")
        assert code == 0
        workspace = json.loads(out)
        assert workspace["name"] == "acme"

        code, out, _ = await _setu(*common, "agent", "create", "--workspace", workspace["id"], "e1")
        assert code == 0 and json.loads(out)["token"].startswith("setu_ag_")

        code, out, _ = await _setu(*common, "agent", "list", "--workspace", workspace["id"])
        assert [a["name"] for a in json.loads(out)["agents"]] == ["e1"]

        code, _, err = await _setu(*common, "workspace", "create", "acme")
        assert code == 2 and err.startswith("error: ") and "ALREADY_EXISTS" in err

        code, _, err = await _setu(*common, "api-key", "create", "--workspace", "nope", "k")
        assert code == 2 and "INVALID_ARGUMENT: workspace_id: must be a UUID" in err
        assert len(err.splitlines()) == 1


async def test_admin_flags_go_anywhere_and_it_prints_field_names_as_the_client_does(
    database_url: str,
) -> None:
    async with in_process(database_url) as server:
        address = f"127.0.0.1:{server.port}"
        code, out, err = await _setu(
            "admin", "workspace", "list", "--server", address, "--admin-token", ADMIN_TOKEN
        )
        assert code == 0, err
        code, out, err = await _setu(
            "admin",
            "--server",
            address,
            "workspace",
            "create",
            "acme",
            "--admin-token",
            ADMIN_TOKEN,
        )
        assert code == 0, err
        workspace = json.loads(out)
        assert "created_at" in workspace and "createdAt" not in workspace
        code, out, _ = await _setu(
            "admin",
            "api-key",
            "list",
            "--workspace",
            workspace["id"],
            "--server",
            address,
            "--admin-token",
            ADMIN_TOKEN,
        )
        assert code == 0 and json.loads(out) == {"api_keys": []}

        code, _, err = await _setu("admin", "workspace", "list", "--server", address)
        assert (
            code == 2
            and err == "error: an admin token is required (--admin-token or SETU_ADMIN_TOKEN)\n"
        )
        code, _, err = await _setu(
            "admin",
            "workspace",
            "list",
            "--admin-token",
            "wrong-token-of-16+chars",
            "--server",
            address,
        )
        assert code == 2 and err.startswith("error: UNAUTHENTICATED") and len(err.splitlines()) == 1


def _commands(help_text: str) -> set[str]:
    listed = help_text.split("{", 1)[1].split("}", 1)[0]
    return set(listed.split(","))


async def test_setu_offers_every_command_and_setu_cli_the_clients_alone() -> None:
    code, out, _ = await _setu("--help")
    assert code == 0
    client = {"connections", "pipelines", "run", "jobs", "apply", "delete", "export"}
    assert _commands(out) == {"dev", "admin", *client}
    code, out, _ = await _setu("--help", module="setu_cli")
    assert code == 0
    assert _commands(out) == client
