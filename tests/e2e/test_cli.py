"""`setu admin …` against a running server; which commands each entry
point offers."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import sys

import pytest

from tests.servers import ADMIN_TOKEN, in_process


async def _setu(*args: str, module: str = "setu_cli.main") -> tuple[int, str, str]:
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

        # --workspace takes an id or a name; an unknown name is said as such.
        code, out, _ = await _setu(*common, "agent", "list", "--workspace", "acme")
        assert code == 0 and [a["name"] for a in json.loads(out)["agents"]] == ["e1"]
        code, _, err = await _setu(*common, "api-key", "create", "--workspace", "nope", "k")
        assert code == 2 and "no workspace named 'nope' (setu admin workspace list" in err
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

        code, out, err = await _setu(
            "--server", address, "admin", "workspace", "list", "--admin-token", ADMIN_TOKEN
        )
        assert code == 0 and [w["name"] for w in json.loads(out)["workspaces"]] == ["acme"]

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
    client = {"connections", "pipelines", "run", "jobs", "agents", "apply", "delete", "export"}
    assert _commands(out) == {"dev", "admin", *client}
    code, out, _ = await _setu("--help", module="setu_cli")
    assert code == 0
    assert _commands(out) == client


async def test_setu_agent_with_a_refused_token_says_so_in_one_line(database_url: str) -> None:
    async with in_process(database_url) as server:
        code, out, err = await _setu(
            "--server",
            f"127.0.0.1:{server.port}",
            "--token",
            "setu_ag_not-a-real-token",
            module="setu_agent.main",
        )
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"setu-agent: error: 127.0.0.1:{server.port} refused the agent token: this agent "
        "token is unknown or has been revoked; pass the token `setu admin agent create` "
        "printed, with --token or SETU_AGENT_TOKEN"
    ]


async def test_setu_agent_help_describes_it_rather_than_pointing_at_itself() -> None:
    code, out, _ = await _setu("--help", module="setu_agent.main")
    assert code == 0
    assert "setu-agent --help" not in out
    assert "Exit codes: 0 stopped by SIGINT/SIGTERM; 2 a refused token" in " ".join(out.split())


_FORK_WITH_GRPC_RUNNING = """
import asyncio, os, sys
import {package}
import grpc

async def main():
    async with grpc.aio.insecure_channel("127.0.0.1:1") as channel:
        try:
            await asyncio.wait_for(channel.channel_ready(), 0.3)
        except TimeoutError:
            pass
        pid = os.fork()  # as pg_ctl's start or a worker's start does
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

asyncio.run(main())
"""


@pytest.mark.parametrize("package", ["setu_server", "setu_cli"])
async def test_a_fork_while_grpc_runs_prints_no_fork_posix_line(package: str) -> None:
    # The test process imported setu_server itself: its setting must not leak in.
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _FORK_WITH_GRPC_RUNNING.format(package=package),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert "fork_posix" not in err.decode()


_IMPORTS_AFTER = """
import sys
from setu_cli.main import main
try:
    main({argv!r})
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m.split(".")[0] == "setu_server"))
"""


@pytest.mark.parametrize("argv", [["--help"], ["jobs", "get", "x"]])
async def test_setu_help_and_client_commands_never_import_the_server(argv: list[str]) -> None:
    # Without an API key `jobs get` goes through the whole command path and
    # stops before it would call.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _IMPORTS_AFTER.format(argv=argv),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert out.decode().splitlines()[-1] == "[]"


async def test_setu_dev_without_the_server_package_says_it_needs_it() -> None:
    # None in sys.modules makes `import setu_server` fail as a missing package would.
    script = "import sys; sys.modules['setu_server'] = None\nfrom setu_cli.main import main\nmain()"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        "dev",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert err.decode().startswith("error: `setu dev` runs a Setu server and needs the server")
    assert len(err.decode().splitlines()) == 1


@pytest.mark.parametrize(
    ("module", "prog"),
    [
        ("setu_cli.main", "setu"),
        ("setu_cli", "setu"),
        ("setu_server.main", "setu-server"),
        ("setu_agent.main", "setu-agent"),
        ("setu_agent.cloud.main", "setu-worker"),
    ],
)
async def test_every_entry_point_prints_its_version(module: str, prog: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        "--version",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert (proc.returncode, err.decode()) == (0, "")
    assert out.decode() == f"{prog} {importlib.metadata.version('setu')}\n"
