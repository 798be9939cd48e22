"""What a user reads about the CLI and the providers says what the code
does: every exit code in `setu --help` and the README, every provider's
config keys in the README's table."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from setu_cli import session
from setu_engine.providers.duckdb import connector as duckdb
from setu_engine.providers.files import connector as files
from setu_engine.providers.mysql import connector as mysql
from setu_engine.providers.postgres import connector as postgres
from setu_engine.providers.sqlite import connector as sqlite

README = Path(__file__).resolve().parents[2] / "README.md"


def exit_codes() -> set[int]:
    return {v for k, v in vars(session).items() if k.startswith("EXIT_") and isinstance(v, int)}


async def setu_help() -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setu_cli",
        "--help",
        stdout=asyncio.subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not k.startswith("SETU_")},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    return out.decode()


async def test_every_exit_code_is_documented_in_help_and_readme() -> None:
    help_text = await setu_help()
    readme = " ".join(README.read_text().split())
    said = "; " + readme.split("Exit codes: ", 1)[1].split(". `setu admin`", 1)[0]

    assert exit_codes() == {0, 1, 2, 3, 4, 130}
    for code in exit_codes():
        assert re.search(rf"^  {code}  \S", help_text, re.MULTILINE), (code, help_text)
        assert f"; {code} " in said, (code, said)


@pytest.mark.parametrize(
    ("provider", "keys"),
    [
        ("postgres", postgres.KEYS),
        ("sqlite", sqlite._KEYS),
        ("file", files._KEYS),
        ("mysql", mysql.KEYS),
        ("duckdb", duckdb._KEYS),
    ],
)
def test_the_readme_names_every_config_key_of_each_provider(
    provider: str, keys: frozenset[str] | tuple[str, ...]
) -> None:
    rows = re.findall(rf"^\| `{provider}` \| (.+) \|$", README.read_text(), re.MULTILINE)
    assert len(rows) == 1, f"the README's provider table has no single row for {provider}"
    named = set(re.findall(r"`([a-z_]+)`", rows[0]))

    assert set(keys) <= named, sorted(set(keys) - named)
