"""The README and `setu dev`'s banner, followed as a newcomer follows them.

A folder stands in for a fresh clone: its `.venv` is this virtualenv and
nothing else is in it. `setu dev` starts there as `make run` starts it
(`.venv/bin/setu dev`, the default data folder `.setu/dev`, on free ports,
on a database of its own), and every command is run by bash in that folder
with a PATH that holds neither `setu` nor `grpcurl` and no virtualenv
activated:

- the banner's commands, as printed, one script in order: the demo runs to
  SUCCEEDED with the command it prints, and GetJob answers for the job id a
  command printed;
- every example of the README in order, after the banner's export line:
  each `sh` block as a script (`set -euo pipefail`), each `yaml` block
  written to the file its first line names and applied with the command
  that line gives, each `python` block saved as example.py and run with
  `.venv/bin/python example.py`. A block preceded by
  `<!-- readme-test: skip (why) -->` is not run; there are at most two.
"""

from __future__ import annotations

import asyncio
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import asyncpg
import pytest
import yaml

from setu_server.dev_banner import COMMANDS_HEADING
from tests.conftest import TEMPLATE, with_database

REPO = Path(__file__).parents[2]
README = REPO / "README.md"
LANGUAGES = ("sh", "yaml", "python", "text")
MAX_SKIPPED = 2
BANNER_END = "The README's examples run as written in that shell."
COMMAND_SECONDS = 120

_FENCE = re.compile(r"^```(.*?)\n(.*?)^```[ \t]*$", re.M | re.S)
_SKIP = re.compile(r"^<!-- readme-test: skip \((.+)\) -->$")
_YAML_HEADER = re.compile(r"^# (?P<file>[\w.-]+\.ya?ml): (?P<command>.+)$")


@dataclass(frozen=True)
class Example:
    line: int  # of the opening fence in README.md
    language: str
    text: str
    skip: str  # why it is not run; "" when it is

    @property
    def where(self) -> str:
        return f"README.md:{self.line} ({self.language})"


def readme_examples(text: str) -> list[Example]:
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        skip = _SKIP.match(before)
        found.append(
            Example(
                line=text.count("\n", 0, match.start()) + 1,
                language=match.group(1).strip(),
                text=match.group(2),
                skip=skip.group(1) if skip else "",
            )
        )
    return found


# ---------------------------------------------------------------- no server


def test_every_readme_block_is_an_example_this_test_knows_how_to_run() -> None:
    examples = readme_examples(README.read_text())
    assert len(examples) >= 8
    for example in examples:
        assert example.language in LANGUAGES, f"{example.where}: name one of {LANGUAGES}"
        if example.language == "yaml":
            header = _YAML_HEADER.match(example.text.splitlines()[0])
            assert header, f"{example.where}: first line `# FILE.yaml: COMMAND`"
            assert header["command"].endswith(header["file"]), example.where
            assert list(yaml.safe_load_all(example.text)), example.where
    skipped = [e for e in examples if e.skip]
    assert len(skipped) <= MAX_SKIPPED, [e.where for e in skipped]
    # The directive is read where it stands: right above a fence.
    assert README.read_text().count("<!-- readme-test:") == len(skipped)


def test_examples_are_read_with_their_language_line_and_skip_reason() -> None:
    text = (
        "# T\n\n<!-- readme-test: skip (needs X) -->\n```sh\nmake run\n```\n\n```yaml\na: 1\n```\n"
    )
    assert readme_examples(text) == [
        Example(4, "sh", "make run\n", "needs X"),
        Example(8, "yaml", "a: 1\n", ""),
    ]


# ---------------------------------------------------------------- a dev server


@dataclass
class DevServer:
    root: Path  # the stand-in for a fresh clone
    banner: str
    env: dict[str, str]  # a new shell's: no virtualenv on the PATH
    warehouse_url: str  # the demo's database
    log: Path

    @property
    def export_line(self) -> str:
        lines = [line.strip() for line in self.banner.splitlines()]
        return next(line for line in lines if line.startswith("export SETU_"))

    def bash(self, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", f"set -euo pipefail\n{script}"],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
        )

    def failure(self, what: str, script: str, done: subprocess.CompletedProcess[str]) -> str:
        log = self.log.read_text()[-3000:]
        return (
            f"{what} exited {done.returncode}\n--- script\n{script}\n--- stdout\n"
            f"{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}\n--- setu dev\n{log}"
        )


def newcomer_env() -> dict[str, str]:
    """A new shell's environment: the PATH without any virtualenv's bin."""
    venvs = {str(Path(sys.prefix) / "bin"), str(REPO / ".venv" / "bin")}
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(":") if p not in venvs]
    env = {
        "PATH": ":".join(path),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }
    assert shutil.which("setu", path=env["PATH"]) is None
    assert shutil.which("grpcurl", path=env["PATH"]) is None
    return env


async def _admin(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def _read_until(stream: IO[bytes], end: str, seconds: float) -> str:
    """What `stream` says up to and including the line `end`, within
    `seconds` (read from the descriptor: a buffered reader would hold lines
    that select() no longer sees)."""
    deadline = time.monotonic() + seconds
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    seen = b""
    while f"\n{end}\n".encode() not in seen and time.monotonic() < deadline:
        if not selector.select(timeout=deadline - time.monotonic()):
            break
        chunk = os.read(stream.fileno(), 65536)
        if not chunk:
            break  # the process ended
        seen += chunk
    text = seen.decode()
    if f"\n{end}\n" not in text:
        raise AssertionError("setu dev printed no complete banner:\n" + text)
    return text


@pytest.fixture(scope="module")
def dev(
    tmp_path_factory: pytest.TempPathFactory, setu_pg_url: str, template_url: str
) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("fresh-clone")
    (root / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    name = f"setu_readme_{os.getpid()}_{time.monotonic_ns() % 10**8}"
    asyncio.run(_admin(setu_pg_url, f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}"))
    database_url = with_database(setu_pg_url, name)
    env = newcomer_env()
    server_env = env | {
        "SETU_DATABASE_URL": database_url,
        "SETU_LISTEN": "127.0.0.1:0",
        "SETU_HTTP_LISTEN": "127.0.0.1:0",
    }
    log = root / "setu-dev.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [".venv/bin/setu", "dev"],
            cwd=root,
            env=server_env,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    try:
        assert proc.stdout is not None
        try:
            banner = _read_until(proc.stdout, BANNER_END, 90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- its stderr\n{log.read_text()[-4000:]}") from None
        warehouse = with_database(setu_pg_url, f"{name}_demo_warehouse")
        yield DevServer(root, banner, env, warehouse, log)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        asyncio.run(
            _admin(
                setu_pg_url,
                f"DROP DATABASE IF EXISTS {name} WITH (FORCE)",
                f"DROP DATABASE IF EXISTS {name}_demo_warehouse WITH (FORCE)",
            )
        )


def banner_commands(banner: str) -> str:
    """The banner's commands as one script: the indented lines below the
    heading, in order (bash joins a line ending in a backslash itself)."""
    after = banner.split(COMMANDS_HEADING, 1)[1].splitlines()[1:]
    return "\n".join(line[2:] for line in after if line.startswith("  "))


@pytest.mark.slow
def test_setu_dev_serves_a_first_run_with_the_commands_it_prints(dev: DevServer) -> None:
    script = banner_commands(dev.banner)
    assert script.startswith("export SETU_SERVER=127.0.0.1:")
    assert ".venv/bin/setu run demo --wait" in script
    assert "00000000-0000" not in script

    done = dev.bash(f'{script}\nprintf "JOB_ID=%s\\n" "$JOB_ID"')

    assert done.returncode == 0, dev.failure("the banner's commands", script, done)
    out = done.stdout
    # The demo ran to the end with the printed command, each stream whole.
    assert re.search(r"^state:\s+succeeded$", out, re.M), out
    assert re.search(r"^customers\s+2,000\s+2,000\b", out, re.M), out
    assert re.search(r"^orders\s+6,000\s+6,000\b", out, re.M), out
    # GetJob answered for the id `setu run` printed.
    job_id = re.findall(r"^JOB_ID=(\S+)$", out, re.M)[-1]
    assert f'"id": "{job_id}"' in out and '"state": "JOB_STATE_SUCCEEDED"' in out
    assert "setu.v1.JobOrchestrationService" in out  # grpcurl list
    assert '"status": "SERVING"' in out  # the health check
    assert '"name": "dev"' in out  # ListWorkspaces with the admin token
    # A shell opened later gets the same line from `setu dev env`.
    env = dev.bash(".venv/bin/setu dev env")
    assert (env.returncode, env.stdout) == (0, dev.export_line + "\n"), env.stderr


@pytest.mark.slow
def test_every_readme_example_runs_as_written_in_order(dev: DevServer) -> None:
    ran = 0
    for example in readme_examples(README.read_text()):
        if example.skip or example.language == "text":
            continue
        script = _script(dev, example)
        done = dev.bash(f"{dev.export_line}\n{script}")
        assert done.returncode == 0, dev.failure(example.where, script, done)
        if example.language == "python":
            _check_sdk_output(done.stdout)
        ran += 1
    assert ran >= 8
    asyncio.run(_check_operator_chain(dev))


def _script(dev: DevServer, example: Example) -> str:
    if example.language == "yaml":
        header = _YAML_HEADER.match(example.text.splitlines()[0])
        assert header, example.where
        (dev.root / header["file"]).write_text(example.text)
        return header["command"]
    if example.language == "python":
        (dev.root / "example.py").write_text(example.text)
        return ".venv/bin/python example.py"
    return example.text


def _check_sdk_output(out: str) -> None:
    lines = out.splitlines()
    assert lines[0].startswith("job ") and len(lines[0].split()[1]) == 36, out
    assert lines[1:4] == ["JobState.SUCCEEDED", "SUCCEEDED 2", "items 2"], out
    assert "shop-to-copy" in lines[4:], out


async def _check_operator_chain(dev: DevServer) -> None:
    """The README's pipeline.yaml did what its chain says, stream by stream."""
    conn = await asyncpg.connect(dev.warehouse_url)
    try:
        customers = await conn.fetch("SELECT * FROM shop_customers ORDER BY id")
        orders = await conn.fetch("SELECT * FROM shop_orders ORDER BY id")
        types = dict(
            await conn.fetch(
                "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'shop_orders'::regclass AND attnum > 0 AND NOT attisdropped"
            )
        )
    finally:
        await conn.close()
    assert len(customers) == 2_000
    first = dict(customers[0])
    assert "name" not in first and first["full_name"] and first["origin"] == "shop"
    assert all(c["email"] is None or re.fullmatch(r"[0-9a-f]{64}", c["email"]) for c in customers)
    assert 0 < len(orders) < 6_000  # the filter dropped void and small orders
    assert {o["origin"] for o in orders} == {"shop"} and "internal_note" not in dict(orders[0])
    assert all(o["status"] != "void" and o["amount"] >= 10 for o in orders)
    # The cast, and the types `columns` declares.
    assert types["customer_id"] == "integer"
    assert types["amount"] == "numeric(12,2)" and types["ordered_at"].startswith("timestamp with")
