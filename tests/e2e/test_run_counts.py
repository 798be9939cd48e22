"""A run's counts add up (docs/jobs-and-tasks.md, "Progress"): rows the
operator chain dropped are called filtered, a run of unchanged rows says
unchanged, a merge says what it deleted; and the CLI's live line fits the
terminal it is drawn in, as a real `setu run` in a pseudo-terminal shows."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import sqlite3
import struct
import sys
import termios
from pathlib import Path
from typing import Any

import pytest

from setu_cli.render import progress_line
from setu_client import JobState, SetuClient
from setu_server.server import Running
from tests.factories import Tenant

ROWS = 50
# Keeps ids 1..30: 20 of the 50 are filtered out.
KEPT = 30
FILTERED = {"operators": [{"op": "filter", "where": f"id <= {KEPT}"}]}


def source_db(tmp_path: Path) -> Path:
    path = tmp_path / "source.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        db.executemany(
            "INSERT INTO users VALUES (?, ?)", [(i, f"name {i}") for i in range(1, ROWS + 1)]
        )
    return path


async def sqlite_pipeline(
    client: SetuClient, tmp_path: Path, spec: dict[str, Any] | None = None, **kw: Any
) -> str:
    src = await client.create_connection("crm", "sqlite", {"path": str(source_db(tmp_path))})
    dst = await client.create_connection(
        "warehouse", "sqlite", {"path": str(tmp_path / "warehouse.db"), "create": True}
    )
    pipeline = await client.create_pipeline(
        "users-sync", src.id, dst.id, streams=["users"], spec=spec or {}, **kw
    )
    return pipeline.id


async def finished(client: SetuClient, pipeline_id: str) -> Any:
    job = await client.submit_run(pipeline_id)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    assert done.state == JobState.SUCCEEDED, done.error_message
    return done


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    return {"data_dir": tmp_path / "server"}


@pytest.fixture
def env(server: Running, tenant: Tenant) -> dict[str, str]:
    """The CLI's environment, for the tenant `client` works in."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    return base | {"SETU_SERVER": f"127.0.0.1:{server.port}", "SETU_API_KEY": tenant.api_key}


async def test_a_filtered_run_names_its_filtered_rows_and_they_add_up(
    client: SetuClient, tmp_path: Path
) -> None:
    done = await finished(client, await sqlite_pipeline(client, tmp_path, FILTERED))
    p = done.progress
    assert (p.rows_extracted, p.rows_loaded, p.rows_filtered) == (ROWS, KEPT, ROWS - KEPT)
    assert p.rows_inserted == KEPT and p.rows_loaded + p.rows_filtered == p.rows_extracted
    line = progress_line(done, width=200)
    assert f"inserted {KEPT}, filtered {ROWS - KEPT}" in line, line
    assert "100%" in line and "loaded" not in line, line
    outputs = await client.job_outputs(done.id)
    assert outputs.totals.rows_filtered == ROWS - KEPT


async def test_a_second_upsert_run_of_unchanged_rows_says_unchanged(
    client: SetuClient, tmp_path: Path
) -> None:
    pipeline_id = await sqlite_pipeline(
        client, tmp_path, {"primary_key": {"users": ["id"]}}, write_mode="upsert"
    )
    first = await finished(client, pipeline_id)
    assert (first.progress.rows_inserted, first.progress.rows_unchanged) == (ROWS, 0)
    second = await finished(client, pipeline_id)
    p = second.progress
    assert (p.rows_inserted, p.rows_updated, p.rows_unchanged) == (0, 0, ROWS)
    line = progress_line(second, width=200)
    assert f"unchanged {ROWS}" in line and "loaded" not in line, line


async def test_a_merge_says_what_it_deleted(client: SetuClient, tmp_path: Path) -> None:
    pipeline_id = await sqlite_pipeline(
        client, tmp_path, {"primary_key": {"users": ["id"]}}, write_mode="merge"
    )
    await finished(client, pipeline_id)
    with sqlite3.connect(tmp_path / "source.db") as db:
        db.execute("DELETE FROM users WHERE id > 45")
    done = await finished(client, pipeline_id)
    assert (done.progress.rows_deleted, done.progress.rows_unchanged) == (5, 45)
    assert "deleted 5" in progress_line(done, width=200)
    (stream,) = (await client.job_outputs(done.id)).streams
    assert stream.deleted == 5


# ---------------------------------------------------------------- the CLI in a pty

ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


async def setu_in_a_pty(width: int, env: dict[str, str], *args: str) -> tuple[int, str]:
    """`setu ARGS` with stdout on a pseudo-terminal `width` columns wide."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, width, 0, 0))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setu_cli.main",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=slave,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side
                return
            if not chunk:
                return
            chunks.append(chunk)

    reading = asyncio.get_running_loop().run_in_executor(None, drain)
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    await asyncio.wait_for(reading, 30)
    os.close(master)
    assert b"Traceback" not in err, err.decode()
    assert proc.returncode is not None
    return proc.returncode, b"".join(chunks).decode()


@pytest.mark.parametrize("width", [60, 80, 200])
async def test_the_live_line_fits_the_terminal_with_percent_elapsed_and_the_end(
    client: SetuClient,
    env: dict[str, str],
    tmp_path: Path,
    width: int,
) -> None:
    await sqlite_pipeline(client, tmp_path, FILTERED)
    code, screen = await setu_in_a_pty(width, env, "run", "users-sync", "--wait")
    assert code == 0, screen
    # Every draw of the live line (between \r and line ends), escapes aside,
    # is narrower than the terminal (the summary below it is a block of its own).
    pieces = [ESCAPES.sub("", d) for d in re.split(r"\r\n|\r|\n", screen)]
    draws = [d for d in pieces if d.split()[:1] in (["pending"], ["running"], ["succeeded"])]
    assert draws and max(len(d) for d in draws) < width, [d for d in draws if len(d) >= width]
    assert "\x1b[K" in screen  # redrawn in place, cleared to the end of the line
    (last,) = [d for d in draws if d.startswith("succeeded ")]
    assert "100%" in last and f"filtered {ROWS - KEPT}" in last, last
    if width >= 80:
        assert re.search(r"\b\d+:\d\d\b", last), last  # elapsed
        assert f"extracted {ROWS}/{ROWS}" in last, last
