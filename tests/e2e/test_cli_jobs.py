"""`setu jobs …` and `setu run` as a person meets them, run as real
processes against an in-process server: an unreachable server says how to
check, `wait --timeout` says it timed out, `events --follow`, `list`
showing runs unless asked, `rerun`, and a paused pipeline's manual run."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import FailedPrecondition, InvalidArgument, JobNotFound, SetuClient
from setu_server import models
from setu_server.server import Running
from setu_server.store import jobs
from tests.e2e.test_cli_data import PIPELINE, connections_yaml, setu
from tests.factories import Tenant, make_job, make_tenant
from tests.servers import free_port


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    return {"data_dir": tmp_path / "server", "task_retry_backoff_seconds": 0.05}


@pytest.fixture
async def tenant_env(server: Running, tenant: Tenant) -> tuple[Tenant, dict[str, str]]:
    """The conftest's tenant (the `client` fixture's too) as the CLI's environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    env = base | {"SETU_SERVER": f"127.0.0.1:{server.port}", "SETU_API_KEY": tenant.api_key}
    return tenant, env


HOW_TO_CHECK = "is the server running? `setu dev` starts one; `setu dev env` prints the settings"


async def test_an_unreachable_server_says_the_address_where_it_came_from_and_how_to_check() -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SETU_")}
    base["SETU_API_KEY"] = "setu_ak_x"
    job_id = str(uuid.uuid4())
    flag, variable = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"  # nothing listens
    (code_f, _, err_f), (code_e, _, err_e) = await asyncio.gather(
        setu("jobs", "get", job_id, "--server", flag, env=base),
        setu("jobs", "get", job_id, env=base | {"SETU_SERVER": variable}),
    )
    assert (code_f, code_e) == (2, 2)
    assert err_f.splitlines() == [
        f"error: cannot reach {flag}: connection refused: nothing listens on that port "
        f"(the address given by --server); {HOW_TO_CHECK} (SETU_SERVER, SETU_API_KEY) of "
        "the last one it started"
    ]
    assert err_e.startswith(f"error: cannot reach {variable}: connection refused")
    assert "(the address in SETU_SERVER); " + HOW_TO_CHECK in err_e
    assert len(err_e.splitlines()) == 1


async def test_jobs_wait_timeout_says_it_timed_out_and_exits_4(
    tenant_env: tuple[Tenant, dict[str, str]], pool: asyncpg.Pool
) -> None:
    tenant, env = tenant_env
    job = await make_job(pool, tenant.workspace_id)  # pending, and nothing will run it
    code, out, err = await setu("jobs", "wait", str(job.id), "--timeout", "0.2", env=env)
    assert code == 4
    assert err.splitlines() == [
        f"timed out after 0.2 s: job {job.id} is still pending and carries on "
        f"(`setu jobs wait {job.id}` waits again, `setu jobs cancel {job.id}` stops it)"
    ]
    assert "state:" in out and "pending" in out


async def _follower(env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setu_cli.main",
        "jobs",
        "events",
        *args,
        "--follow",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


@pytest.mark.parametrize(("ending", "exit_code"), [("SUCCEEDED", 0), ("FAILED", 1)])
async def test_jobs_events_follow_prints_events_as_they_come_and_exits_as_the_job_ended(
    tenant_env: tuple[Tenant, dict[str, str]], pool: asyncpg.Pool, ending: str, exit_code: int
) -> None:
    tenant, env = tenant_env
    job = await make_job(pool, tenant.workspace_id)
    await jobs.insert_job_event(pool, job.id, "before the follow", now=None)
    proc = await _follower(env, str(job.id))
    assert proc.stdout is not None and proc.stderr is not None
    first = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert first.decode().rstrip().endswith("info   -  before the follow")

    # It is following now: these come after it started.
    await jobs.transition_job(pool, job.id, models.JobState.RUNNING, now=None, message="began")
    await jobs.insert_job_event(pool, job.id, "half way", now=None, stream="users")
    await jobs.transition_job(pool, job.id, models.JobState[ending], now=None, message="ended")
    rest, err = await asyncio.wait_for(proc.communicate(), 60)
    assert (await proc.wait(), err.decode()) == (exit_code, "")
    messages = [line.split(None, 3)[3] for line in rest.decode().splitlines()]
    assert messages == ["began", "half way", "ended"]  # each once, in order
    assert rest.decode().splitlines()[1].split()[1:3] == ["info", "users"]


async def test_jobs_events_follow_json_is_one_object_a_line(
    tenant_env: tuple[Tenant, dict[str, str]], pool: asyncpg.Pool
) -> None:
    tenant, env = tenant_env
    job = await make_job(pool, tenant.workspace_id)
    await jobs.transition_job(pool, job.id, models.JobState.CANCELLED, now=None, message="stop")
    code, out, _ = await setu("jobs", "events", str(job.id), "--follow", "--json", env=env)
    assert code == 3  # cancelled
    assert [json.loads(line)["message"] for line in out.splitlines()] == ["stop"]


async def test_jobs_list_shows_runs_unless_asked_for_other_kinds(
    tenant_env: tuple[Tenant, dict[str, str]], pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant, env = tenant_env
    await setu("connections", "create", "-f", str(connections_yaml(tmp_path)), env=env)
    await setu("pipelines", "create", "-f", "-", env=env, stdin=json.dumps(PIPELINE))
    code, out, _ = await setu("run", "users-sync", "--no-start", env=env)
    run = out.strip()
    test = await make_job(pool, tenant.workspace_id, kind=models.JobKind.TEST)
    preview = await make_job(pool, tenant.workspace_id, kind=models.JobKind.PREVIEW)

    async def listed(*args: str) -> list[str]:
        code, out, err = await setu("jobs", "list", *args, "--json", env=env)
        assert code == 0, err
        return [j["id"] for j in json.loads(out)["jobs"]]

    assert await listed() == [run]
    assert await listed("--kind", "test") == [str(test.id)]
    assert await listed("--kind", "test", "preview") == [str(preview.id), str(test.id)]
    assert await listed("--kind", "all") == [str(preview.id), str(test.id), run]
    code, _, err = await setu("jobs", "list", "--kind", "tests", env=env)
    assert code == 2 and "invalid choice: 'tests'" in err


async def _first_event(client: SetuClient, job_id: str) -> str:
    async for event in client.job_events(job_id):
        return event.message
    raise AssertionError(f"job {job_id} has no events")


async def test_jobs_rerun_runs_the_same_pipeline_again_and_its_first_event_names_the_old_run(
    tenant_env: tuple[Tenant, dict[str, str]],
    client: SetuClient,
    pool: asyncpg.Pool,
    tmp_path: Path,
) -> None:
    tenant, env = tenant_env
    await setu("connections", "create", "-f", str(connections_yaml(tmp_path)), env=env)
    overwrite = PIPELINE | {"write_mode": "overwrite"}  # a run again lands the same rows
    await setu("pipelines", "create", "-f", "-", env=env, stdin=json.dumps(overwrite))
    code, out, _ = await setu("run", "users-sync", "--wait", env=env)
    assert code == 0, out
    first = out.splitlines()[0].split()[1]

    code, out, err = await setu("jobs", "rerun", first, "--wait", env=env)
    assert code == 0, err
    again = err.splitlines()[0].split()[1].rstrip(":")
    assert err.splitlines()[0] == f"job {again}: a rerun of job {first}"
    assert "succeeded" in out
    old, new = await client.get_job(first), await client.get_job(again)
    assert new.pipeline_id == old.pipeline_id and not new.dry_run
    assert (await _first_event(client, again)).endswith(f"; rerun of job {first}")

    # A dry run is rerun as a dry run.
    planned = await client.submit_run(old.pipeline_id, dry_run=True)
    code, out, err = await setu("jobs", "rerun", planned.id, env=env)
    assert code == 0, err
    assert (await client.get_job(out.strip())).dry_run

    # No run to repeat: a connection's test, or a run whose pipeline is gone.
    test = await make_job(pool, tenant.workspace_id, kind=models.JobKind.TEST)
    code, _, err = await setu("jobs", "rerun", str(test.id), env=env)
    assert (code, err) == (
        2,
        f"error: job {test.id} is a test of a connection, not a run: there is no run to repeat\n",
    )
    await client.delete_pipeline(old.pipeline_id)
    code, _, err = await setu("jobs", "rerun", first, env=env)
    assert code == 2 and "ran a pipeline that has since been deleted" in err


async def test_submit_run_rerun_of_takes_only_a_run_of_that_pipeline_in_its_own_workspace(
    client: SetuClient, tenant: Tenant, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    source = await client.create_connection(
        "s", "sqlite", {"path": str(tmp_path / "s.db"), "create": True}
    )
    into = await client.create_connection(
        "d", "sqlite", {"path": str(tmp_path / "d.db"), "create": True}
    )
    one = await client.create_pipeline("one", source.id, into.id)
    two = await client.create_pipeline("two", source.id, into.id)
    ran = await client.submit_run(one.id, start=False)

    stranger = await make_tenant(pool)
    theirs = await make_job(pool, stranger.workspace_id, kind=models.JobKind.RUN)
    # Another workspace's job is as unknown as a job that never was.
    for unknown in (theirs.id, uuid.uuid4()):
        with pytest.raises(JobNotFound, match=f"rerun_of: job {unknown} not found"):
            await client.submit_run(one.id, start=False, rerun_of=str(unknown))
    with pytest.raises(InvalidArgument, match="is a run of another pipeline"):
        await client.submit_run(two.id, start=False, rerun_of=ran.id)
    test = await make_job(pool, tenant.workspace_id, kind=models.JobKind.TEST)
    with pytest.raises(FailedPrecondition, match="is a test of a connection, not a run"):
        await client.submit_run(one.id, start=False, rerun_of=str(test.id))
    with pytest.raises(InvalidArgument, match="rerun_of"):
        await client.submit_run(one.id, start=False, rerun_of="not-a-uuid")
    again = await client.submit_run(one.id, start=False, rerun_of=ran.id)
    assert (await _first_event(client, again.id)).endswith(f"; rerun of job {ran.id}")


async def test_a_paused_pipelines_manual_run_says_it_goes_ahead(
    tenant_env: tuple[Tenant, dict[str, str]], client: SetuClient, tmp_path: Path
) -> None:
    _, env = tenant_env
    await setu("connections", "create", "-f", str(connections_yaml(tmp_path)), env=env)
    await setu("pipelines", "create", "-f", "-", env=env, stdin=json.dumps(PIPELINE))
    code, out, err = await setu("run", "users-sync", "--no-start", env=env)
    assert code == 0 and err == ""  # not paused: nothing to say
    assert "paused" not in await _first_event(client, out.strip())

    await setu("pipelines", "update", "users-sync", "--set", "paused=true", env=env)
    code, out, err = await setu("run", "users-sync", "--no-start", env=env)
    assert code == 0 and len(out.strip()) == 36  # stdout is still the id alone
    said = "pipeline is paused: schedules make no runs; this manual run goes ahead"
    assert err.splitlines() == [said]
    assert (await _first_event(client, out.strip())).endswith(f"; {said}")
    # A rerun is a manual run too, and says so the same way.
    code, out, err = await setu("jobs", "rerun", out.strip(), "--no-start", env=env)
    assert code == 0 and err.splitlines()[1:] == [said], err
    assert (await _first_event(client, out.strip())).endswith(f"; {said}")
