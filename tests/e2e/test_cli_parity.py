"""Every command of `setu` (the client's) answers `--json` with one JSON
document, and a refused call with one line and exit code 2: walked from the
parser itself, so a command added without either fails here."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_cli.main import add_client_commands
from setu_cli.session import server_options
from setu_server.server import Running
from tests.e2e.test_cli_data import PIPELINE, connections_yaml, setu
from tests.factories import make_tenant


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    return {"data_dir": tmp_path / "server"}


@pytest.fixture
async def env(server: Running, pool: asyncpg.Pool) -> dict[str, str]:
    tenant = await make_tenant(pool)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    return base | {"SETU_SERVER": f"127.0.0.1:{server.port}", "SETU_API_KEY": tenant.api_key}


def leaf_commands() -> set[str]:
    """Every command the client's `setu` offers, as "jobs list", "run", …"""
    parser = argparse.ArgumentParser(prog="setu", parents=[server_options()])
    add_client_commands(parser.add_subparsers(dest="command", required=True))

    def walk(node: argparse.ArgumentParser, path: str) -> Iterator[str]:
        groups = [a for a in node._actions if isinstance(a, argparse._SubParsersAction)]
        if not groups:
            yield path.strip()
        for group in groups:
            for name, child in group.choices.items():
                yield from walk(child, f"{path} {name}")

    return set(walk(parser, ""))


# Each command's arguments for a call that works, in an order where each
# finds what the ones before made; {job} is the job `run` submitted, and
# each expected exit code is the one documented for that outcome.
CALLS: list[tuple[str, tuple[str, ...], int]] = [
    ("connections create", ("-f", "{connections}"), 0),
    ("connections list", (), 0),
    ("connections get", ("crm",), 0),
    ("connections update", ("warehouse", "--set", "config.create=true"), 0),
    ("connections test", ("crm",), 0),
    ("connections discover", ("crm",), 0),
    ("connections preview", ("crm", "users", "--limit", "1"), 0),
    ("pipelines create", ("-f", "{pipeline}"), 0),
    ("pipelines list", (), 0),
    ("pipelines get", ("users-sync",), 0),
    ("pipelines update", ("users-sync", "--set", "write_mode=append"), 0),
    ("run", ("users-sync", "--no-start"), 0),
    ("jobs start", ("{job}",), 0),
    ("jobs wait", ("{job}",), 0),
    ("jobs watch", ("{job}",), 0),
    ("jobs get", ("{job}",), 0),
    ("jobs events", ("{job}",), 0),
    ("jobs outputs", ("{job}",), 0),
    ("jobs cancel", ("{job}",), 0),
    ("jobs list", ("--state", "succeeded", "--pipeline", "users-sync", "--limit", "5"), 0),
    ("jobs rerun", ("{job}", "--no-start"), 0),
    ("pipelines state", ("users-sync",), 0),
    ("pipelines reset-state", ("users-sync",), 0),
    ("agents list", (), 0),
    ("export", (), 0),
    ("apply", ("-f", "-", "--dry-run"), 0),  # stdin: what export printed
    ("delete", ("-f", "-", "--dry-run"), 0),
    ("pipelines delete", ("users-sync",), 0),
    ("connections delete", ("crm",), 0),
]


def test_the_parity_table_names_every_command() -> None:
    assert {name for name, _, _ in CALLS} == leaf_commands()


async def test_every_command_answers_json(env: dict[str, str], tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.json"
    pipeline.write_text(json.dumps(PIPELINE))
    values = {
        "connections": str(connections_yaml(tmp_path)),
        "pipeline": str(pipeline),
    }
    exported = ""
    answers: dict[str, Any] = {}
    for name, args, expected in CALLS:
        argv = [*name.split(), *(arg.format(**values) for arg in args), "--json"]
        code, out, err = await setu(*argv, env=env, stdin=exported)
        assert code == expected, (argv, err)
        try:
            answers[name] = json.loads(out)
        except json.JSONDecodeError:
            pytest.fail(f"setu {' '.join(argv)} printed no single JSON document: {out!r}")
        if name == "run":
            values["job"] = answers[name]["id"]
        if name == "export":
            exported = out

    assert answers["jobs wait"]["job"]["state"] == answers["jobs get"]["state"]
    assert answers["jobs get"]["state"] in {"succeeded", "SUCCEEDED", "JOB_STATE_SUCCEEDED"}
    assert [j["id"] for j in answers["jobs list"]["jobs"]] == [values["job"]]
    assert answers["connections test"]["ok"] is True
    assert isinstance(answers["agents list"]["agents"], list)


async def test_every_command_refuses_in_one_line_with_exit_code_2(
    env: dict[str, str], tmp_path: Path
) -> None:
    # A name that does not exist (or a file that does not), for each command
    # that takes one; --json or not, the refusal is one line on stderr.
    missing = str(tmp_path / "absent.yaml")
    refused = []
    for name, args, _ in CALLS:
        if not args:
            continue
        argv = [*name.split(), *(missing if "{" in a or a == "-" else a for a in args)]
        argv = [("nope" if a in {"crm", "warehouse", "users-sync"} else a) for a in argv]
        code, _, err = await setu(*argv, env=env)
        refused.append((name, code, err.strip().count("\n"), err.startswith("error: ")))

    assert all(code == 2 and lines == 0 and prefixed for _, code, lines, prefixed in refused), [
        r for r in refused if r[1:] != (2, 0, True)
    ]
