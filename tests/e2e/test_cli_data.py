"""`setu connections|pipelines|run|jobs …`: the client commands, run as real
processes against an in-process server, moving rows sqlite → sqlite; and the
live progress line, rendered from sample snapshots."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_cli.inputs import read_documents
from setu_cli.render import ProgressDisplay, RateMeter, progress_line
from setu_client import Job, JobKind, JobState, Phase, Progress
from setu_server.server import Running
from tests.factories import make_tenant

ROWS = [(i, f"name {i}") for i in range(1, 51)]


async def setu(*args: str, env: dict[str, str], stdin: str = "") -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setu_cli.main",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 120)
    assert proc.returncode is not None
    assert b"Traceback" not in err, err.decode()
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    return {"data_dir": tmp_path / "server", "task_retry_backoff_seconds": 0.05}


@pytest.fixture
async def env(server: Running, pool: asyncpg.Pool) -> dict[str, str]:
    tenant = await make_tenant(pool)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    return base | {"SETU_SERVER": f"127.0.0.1:{server.port}", "SETU_API_KEY": tenant.api_key}


def connections_yaml(tmp_path: Path) -> Path:
    source = tmp_path / "source.db"
    db = sqlite3.connect(source)
    db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    db.executemany("INSERT INTO users VALUES (?, ?)", ROWS)
    db.commit()
    db.close()
    path = tmp_path / "connections.yaml"
    path.write_text(
        f"""
- name: crm
  provider: sqlite
  config: {{path: "{source}"}}
- name: warehouse
  provider: sqlite
  placement: cloud
  config:
    path: "{tmp_path / "warehouse.db"}"
    create: true
"""
    )
    return path


PIPELINE = {"name": "users-sync", "source": "crm", "destination": "warehouse", "streams": ["users"]}


async def test_connections_and_pipelines_from_files_then_a_run_lands_the_rows(
    env: dict[str, str], tmp_path: Path
) -> None:
    code, out, _ = await setu(
        "connections", "create", "-f", str(connections_yaml(tmp_path)), env=env
    )
    assert code == 0
    assert "created connection crm" in out and "created connection warehouse" in out

    code, out, _ = await setu(
        "pipelines", "create", "-f", "-", "--json", env=env, stdin=json.dumps(PIPELINE)
    )
    assert code == 0
    pipeline = json.loads(out)
    code, out, _ = await setu("connections", "list", "--json", env=env)
    ids = {c["name"]: c["id"] for c in json.loads(out)["connections"]}
    assert pipeline["source_connection_id"] == ids["crm"]
    assert pipeline["destination_connection_id"] == ids["warehouse"]

    code, out, _ = await setu("pipelines", "list", env=env)
    header, row = out.splitlines()
    assert header.split() == ["NAME", "SOURCE", "DESTINATION", "MODE", "SCHEDULE", "PAUSED", "ID"]
    assert row.split() == ["users-sync", "crm", "warehouse", "append", "-", pipeline["id"]]
    assert header.index("SOURCE") == row.index("crm")  # aligned

    code, out, _ = await setu("run", "users-sync", "--wait", env=env)
    assert code == 0, out
    job_id = out.splitlines()[0].split()[1]
    assert "state:" in out and "succeeded" in out
    assert any(line.split()[:3] == ["users", "50", "50"] for line in out.splitlines())
    # Not a terminal: a plain line per change, and the last one is the end.
    progress = [
        line for line in out.splitlines() if line.startswith(("pending", "running", "succ"))
    ]
    assert progress and progress[-1].startswith("succeeded")
    with sqlite3.connect(tmp_path / "warehouse.db") as db:
        assert db.execute("SELECT id, name FROM users ORDER BY id").fetchall() == ROWS

    code, out, _ = await setu("jobs", "get", job_id, "--json", env=env)
    job = json.loads(out)
    assert code == 0 and job["state"] == "JOB_STATE_SUCCEEDED"
    assert job["pipeline_id"] == pipeline["id"] and job["progress"]["rows_loaded"] == 50

    code, out, _ = await setu("jobs", "outputs", job_id, "--json", env=env)
    assert [(s["stream"], s["rows_loaded"]) for s in json.loads(out)["streams"]] == [("users", 50)]

    code, out, _ = await setu("jobs", "events", job_id, env=env)
    assert code == 0 and out.splitlines()[0].split() == ["TIME", "LEVEL", "STREAM", "MESSAGE"]
    assert len(out.splitlines()) > 2 and "Z " in out.splitlines()[1]  # UTC timestamps

    code, out, _ = await setu("jobs", "cancel", job_id, "--reason", "too late", env=env)
    assert code == 0 and out.strip() == f"job {job_id} is succeeded"

    code, out, _ = await setu("jobs", "wait", job_id, "--json", env=env)
    assert code == 0 and json.loads(out)["job"]["state"] == "JOB_STATE_SUCCEEDED"


async def test_run_json_list_filters_and_refusals(env: dict[str, str], tmp_path: Path) -> None:
    await setu("connections", "create", "-f", str(connections_yaml(tmp_path)), env=env)
    pipeline_file = tmp_path / "pipeline.json"
    pipeline_file.write_text(json.dumps(PIPELINE | {"write_mode": "overwrite"}))
    code, _, _ = await setu("pipelines", "create", "-f", str(pipeline_file), env=env)
    assert code == 0

    code, out, err = await setu("run", "users-sync", "--wait", "--json", env=env)
    assert code == 0
    done = json.loads(out)  # the progress lines went to stderr
    assert done["job"]["state"] == "JOB_STATE_SUCCEEDED" and "extracted" in err
    assert done["outputs"]["totals"]["rows_loaded"] == 50

    code, out, _ = await setu("connections", "get", "crm", env=env)
    assert code == 0 and out.splitlines()[1:3] == ["name:       crm", "provider:   sqlite"]
    code, out, _ = await setu("pipelines", "get", done["job"]["pipeline_id"], env=env)
    assert "source:      crm" in out and "write_mode:  overwrite" in out

    code, out, _ = await setu("run", "users-sync", "--no-start", env=env)
    ready = out.strip()
    assert code == 0 and len(ready) == 36

    code, out, _ = await setu("jobs", "list", "--pipeline", "users-sync", "--json", env=env)
    assert [(j["id"], j["state"]) for j in json.loads(out)["jobs"]] == [
        (ready, "JOB_STATE_READY"),
        (done["job"]["id"], "JOB_STATE_SUCCEEDED"),
    ]
    code, out, _ = await setu("jobs", "list", "--state", "succeeded", "--limit", "5", env=env)
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [[done["job"]["id"], "succeeded"]]

    code, out, _ = await setu("jobs", "cancel", ready, env=env)
    assert code == 0 and "cancelled" in out
    code, out, _ = await setu("jobs", "wait", ready, env=env)
    assert code == 3 and "cancelled" in out

    code, _, err = await setu("run", "nope", env=env)
    assert code == 2 and err.strip() == "error: no pipeline named 'nope'"
    code, _, err = await setu("connections", "delete", "crm", env=env)
    assert code == 2 and err.startswith("error: ")
    code, _, err = await setu("pipelines", "create", "-f", str(pipeline_file), env=env)
    assert code == 2 and err.startswith("error: ")  # the name is taken

    code, out, _ = await setu("pipelines", "delete", "users-sync", env=env)
    assert code == 0 and out.startswith("deleted pipeline users-sync")
    code, out, _ = await setu("connections", "delete", "crm", env=env)
    assert code == 0
    code, out, _ = await setu("connections", "list", env=env)
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["warehouse"]


async def test_a_failed_run_exits_1_and_ctrl_c_stops_only_the_waiting(
    env: dict[str, str], tmp_path: Path
) -> None:
    connections = [
        {"name": "gone", "provider": "sqlite", "config": {"path": str(tmp_path / "no.db")}},
        {
            "name": "made",
            "provider": "sqlite",
            "config": {"path": str(tmp_path / "o.db"), "create": True},
        },
    ]
    await setu("connections", "create", "-f", "-", env=env, stdin=json.dumps(connections))
    broken = {"name": "broken", "source": "gone", "destination": "made"}
    await setu("pipelines", "create", "-f", "-", env=env, stdin=json.dumps(broken))

    code, out, _ = await setu("run", "broken", "--wait", env=env)
    assert code == 1 and "state:       failed" in out
    assert "error:" in out and "no.db" in out

    code, out, _ = await setu("run", "broken", "--no-start", env=env)
    ready = out.strip()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setu_cli.main",
        "jobs",
        "watch",
        ready,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert first.decode().startswith("ready")  # the watch is under way
    proc.send_signal(signal.SIGINT)
    err = await asyncio.wait_for(proc.stderr.read(), 60)
    assert await proc.wait() == 130
    assert f"setu jobs cancel {ready}" in err.decode() and b"Traceback" not in err
    code, out, _ = await setu("jobs", "get", ready, "--json", env=env)
    assert json.loads(out)["state"] == "JOB_STATE_READY"  # waiting stopped; the job did not


async def test_connections_get_shows_integers_as_integers(
    env: dict[str, str], pool: asyncpg.Pool
) -> None:
    # The config travels as a google.protobuf.Struct, whose numbers are doubles.
    warehouse = {
        "name": "warehouse",
        "provider": "postgres",
        "config": {"host": "db.example.com", "port": 55432, "database": "dw", "user": "setu"},
    }
    code, _, err = await setu(
        "connections", "create", "-f", "-", env=env, stdin=json.dumps(warehouse)
    )
    assert code == 0, err
    # The server stores it as the integer it was (runtimes read it from there).
    stored = await pool.fetchval("SELECT config->>'port' FROM connection WHERE name = 'warehouse'")
    assert stored == "55432"

    code, out, _ = await setu("connections", "get", "warehouse", env=env)
    config = next(line for line in out.splitlines() if line.startswith("config:"))
    assert '"port": 55432,' in config and "55432.0" not in out

    code, out, _ = await setu("connections", "get", "warehouse", "--json", env=env)
    port = json.loads(out)["config"]["port"]
    assert (port, type(port)) == (55432, int) and "55432.0" not in out


async def test_missing_api_key_and_bad_files_exit_2(env: dict[str, str], tmp_path: Path) -> None:
    keyless = {k: v for k, v in env.items() if k != "SETU_API_KEY"}
    code, _, err = await setu("connections", "list", env=keyless)
    assert code == 2 and "API key is required" in err

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nprovider: sqlite\ncolour: blue\n")
    code, _, err = await setu("connections", "create", "-f", str(bad), env=env)
    assert code == 2 and "unknown field(s) colour" in err

    code, _, err = await setu("connections", "create", "-f", str(tmp_path / "none.yaml"), env=env)
    assert code == 2 and "none.yaml" in err

    code, _, err = await setu("jobs", "get", "not-a-uuid", env=env)
    assert code == 2 and err.startswith("error: ")


# -- the pieces, without a server ----------------------------------------------


def snapshot(state: JobState, phase: Phase, extracted: int, loaded: int, total: int) -> Job:
    return Job(
        id="",
        workspace_id="",
        kind=JobKind.RUN,
        state=state,
        version=1,
        phase=phase,
        progress=Progress(rows_extracted=extracted, rows_loaded=loaded, rows_total=total),
    )


def test_progress_line_shows_phase_rows_bar_and_rate() -> None:
    pending = snapshot(JobState.PENDING, Phase.UNSPECIFIED, 0, 0, 0)
    assert progress_line(pending, None).split() == ["pending", "-", "extracted", "0"]

    extracting = snapshot(JobState.RUNNING, Phase.EXTRACT, 1_250, 0, 5_000)
    assert progress_line(extracting, 812.4, elapsed=65) == (
        "running    extract  extracted 1,250/5,000  [#####---------------] 25%  1:05  "
        "eta 0:04  812 rows/s"
    )
    loading = snapshot(JobState.RUNNING, Phase.LOAD, 5_000, 2_500, 5_000)
    assert "loaded 2,500/5,000  [##########----------] 50%" in progress_line(loading, None)

    unknown_total = snapshot(JobState.RUNNING, Phase.DIRECT, 0, 7, 0)
    assert "[" not in progress_line(unknown_total, None) and "loaded 7" in progress_line(
        unknown_total, None
    )


def test_rate_counts_rows_of_the_current_phase_since_its_first_snapshot() -> None:
    meter = RateMeter()
    assert meter.rate(snapshot(JobState.RUNNING, Phase.EXTRACT, 100, 0, 0), 10.0) is None
    assert meter.rate(snapshot(JobState.RUNNING, Phase.EXTRACT, 500, 0, 0), 12.0) == 200.0
    # A new phase starts a new measure.
    assert meter.rate(snapshot(JobState.RUNNING, Phase.LOAD, 500, 0, 0), 13.0) is None
    assert meter.rate(snapshot(JobState.RUNNING, Phase.LOAD, 500, 300, 0), 14.0) == 300.0


def test_display_redraws_one_line_on_a_terminal_and_prints_changes_elsewhere() -> None:
    jobs = [
        snapshot(JobState.RUNNING, Phase.EXTRACT, 10, 0, 40),
        snapshot(JobState.RUNNING, Phase.EXTRACT, 10, 0, 40),  # nothing visible changed
        snapshot(JobState.SUCCEEDED, Phase.LOAD, 40, 40, 40),
    ]
    times = iter([0.0, 1.0, 2.0])
    log = io.StringIO()
    plain = ProgressDisplay(log, tty=False, clock=lambda: next(times))
    for job in jobs:
        plain.show(job)
    plain.close()
    lines = log.getvalue().splitlines()
    assert [line.split()[0] for line in lines] == ["running", "succeeded"]
    assert "\r" not in log.getvalue() and "\x1b" not in log.getvalue()

    times = iter([0.0, 1.0, 2.0])
    screen = io.StringIO()
    live = ProgressDisplay(screen, tty=True, clock=lambda: next(times), width=lambda: 80)
    for job in jobs:
        live.show(job)
    live.close()
    draws = screen.getvalue().split("\r")
    # Each draw clears to the end of the line; the last one stays, on its own line.
    assert all(d.endswith("\x1b[K") for d in draws[1:3]), draws
    assert [d.split()[0] for d in draws[1:4]] == ["running", "running", "succeeded"]
    assert draws[3].endswith("\x1b[K\n") and len(draws) == 4


def test_plain_lines_come_at_a_slower_cadence_while_only_counts_change() -> None:
    """Away from a terminal, counts print at most every PLAIN_EVERY_SECONDS;
    a phase change prints at once, and the last snapshot is never lost."""
    times = iter([0.0, 1.0, 2.0, 3.0, 3.5, 4.0])
    log = io.StringIO()
    plain = ProgressDisplay(log, tty=False, clock=lambda: next(times))
    for extracted in (10, 20, 30):  # within PLAIN_EVERY_SECONDS of the first
        plain.show(snapshot(JobState.RUNNING, Phase.EXTRACT, extracted, 0, 100))
    plain.show(snapshot(JobState.RUNNING, Phase.LOAD, 100, 10, 100))
    plain.show(snapshot(JobState.RUNNING, Phase.LOAD, 100, 50, 100))
    plain.close()
    lines = log.getvalue().splitlines()
    assert [line.split()[2:4] for line in lines] == [
        ["extracted", "10/100"],
        ["extracted", "100"],
        ["extracted", "100"],
    ], lines
    assert "loaded 10/100" in lines[1] and "loaded 50/100" in lines[2]


def test_documents_are_yaml_or_json_by_extension_or_content(tmp_path: Path) -> None:
    as_json = tmp_path / "c.txt"
    as_json.write_text('[{"name": "a"}, {"name": "b"}]')
    assert read_documents(str(as_json)) == [{"name": "a"}, {"name": "b"}]
    as_yaml = tmp_path / "c.yml"
    as_yaml.write_text("name: a\nconfig: {path: x}\n")
    assert read_documents(str(as_yaml)) == [{"name": "a", "config": {"path": "x"}}]
