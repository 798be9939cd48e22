"""setu-server as real processes: grpcurl, concurrent start, embedded
PostgreSQL lifecycle, graceful shutdown, and `setu dev`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import asyncpg
import grpc
import psutil
import pytest

from setu_client._proto.setu.v1 import admin_pb2, admin_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from setu_client.channel import open_channel
from setu_server.store.migrate import migrations
from tests.e2e.monitor_helpers import open_monitor
from tests.servers import ADMIN_TOKEN, free_port, server_process, wait_healthy

GRPCURL = shutil.which("grpcurl") or str(Path(sys.executable).parent / "grpcurl")
SERVICES = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "setu.v1.AdminService",
    "setu.v1.AgentDirectoryService",
    "setu.v1.AgentService",
    "setu.v1.CloudRunService",
    "setu.v1.ConnectionService",
    "setu.v1.JobOrchestrationService",
    "setu.v1.PipelineService",
]


async def test_grpcurl_lists_describes_and_checks_health(database_url: str, tmp_path: Path) -> None:
    with server_process({"SETU_DATABASE_URL": database_url}, tmp_path / "server.log") as (_, port):
        await wait_healthy(port)
        address = f"127.0.0.1:{port}"
        listed = await asyncio.to_thread(_grpcurl_raw, address, "list")
        assert listed.split() == SERVICES
        described = await asyncio.to_thread(
            _grpcurl_raw, address, "describe", "setu.v1.JobOrchestrationService"
        )
        for rpc in ("SubmitRun", "WaitJob", "WatchJob", "CancelJob", "GetJobOutputs"):
            assert f"rpc {rpc} " in described
        method = await asyncio.to_thread(
            _grpcurl_raw, address, "describe", "setu.v1.AgentService.LeaseTask"
        )
        assert "returns ( .setu.v1.LeaseTaskResponse )" in method
        health = await asyncio.to_thread(_grpcurl_raw, address, "describe", "grpc.health.v1.Health")
        assert "rpc Check" in health
        check = await asyncio.to_thread(_grpcurl_raw, address, "grpc.health.v1.Health/Check")
        assert json.loads(check) == {"status": "SERVING"}


def _grpcurl_raw(address: str, *args: str) -> str:
    done = subprocess.run(
        [GRPCURL, "-plaintext", address, *args], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_two_servers_started_at_once_on_an_empty_database_both_come_up(
    empty_database_url: str, tmp_path: Path
) -> None:
    env = {"SETU_DATABASE_URL": empty_database_url}
    with (
        server_process(env, tmp_path / "a.log") as (_, port_a),
        server_process(env, tmp_path / "b.log") as (_, port_b),
    ):
        await asyncio.gather(wait_healthy(port_a), wait_healthy(port_b))
    conn = await asyncpg.connect(empty_database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM schema_migration") == len(migrations())
    finally:
        await conn.close()


def _postgres_on(data_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and str(data_dir) in " ".join(
            proc.info["cmdline"] or ()
        ):
            found.append(proc)
    return found


async def test_embedded_postgres_starts_stops_and_is_reused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = {"SETU_DATABASE_URL": "", "SETU_DATA_DIR": str(data_dir)}
    with server_process(env, tmp_path / "first.log") as (proc, port):
        await wait_healthy(port)
        assert _postgres_on(data_dir), "an embedded PostgreSQL serves this server"
        async with open_channel(f"127.0.0.1:{port}", ADMIN_TOKEN) as channel:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            await stub.CreateWorkspace(admin_pb2.CreateWorkspaceRequest(name="kept"))
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
    assert not _postgres_on(data_dir), "PostgreSQL stops with the server"

    with server_process(env, tmp_path / "second.log") as (_, port):
        await wait_healthy(port)
        async with open_channel(f"127.0.0.1:{port}", ADMIN_TOKEN) as channel:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            listed = await stub.ListWorkspaces(admin_pb2.ListWorkspacesRequest())
        assert [w.name for w in listed.workspaces] == ["kept"]
    assert not _postgres_on(data_dir)


async def test_sigterm_stops_taking_calls_and_exits_cleanly(
    database_url: str, tmp_path: Path
) -> None:
    with server_process({"SETU_DATABASE_URL": database_url}, tmp_path / "s.log") as (proc, port):
        await wait_healthy(port)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
        async with open_channel(f"127.0.0.1:{port}", ADMIN_TOKEN) as channel:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ListWorkspaces(admin_pb2.ListWorkspacesRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    log = (tmp_path / "s.log").read_text()
    assert '"msg": "shutting down"' in log


async def _dev_banner(proc: asyncio.subprocess.Process) -> dict[str, str]:
    assert proc.stdout is not None
    seen: dict[str, str] = {}
    while "reach" not in seen:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert line, "setu dev exited before printing its credentials"
        match = re.match(r"^\s+(workspace|API key|admin)\s+(\S+)$", line)
        if match:
            seen[match[1]] = match[2]
        if "cloud connections" in line:
            seen["reach"] = line.strip()
    return seen


async def test_setu_dev_creates_credentials_once_and_serves(tmp_path: Path) -> None:
    port = free_port()
    env = os.environ | {"SETU_DATABASE_URL": ""}
    printed = []
    for _ in range(2):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "setu_cli.main",
            "dev",
            "--data-dir",
            str(tmp_path / "dev"),
            "--listen",
            f"127.0.0.1:{port}",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            banner = await _dev_banner(proc)
            assert "(SETU_CLOUD_REACH=local)" in banner["reach"]
            async with open_channel(f"127.0.0.1:{port}", banner["API key"]) as channel:
                jobs = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await jobs.GetJob(
                        jobs_pb2.GetJobRequest(job_id="0b4f5e2c-1b7e-4f0e-9a55-3c2d1e0f9a11")
                    )
                assert info.value.code() == grpc.StatusCode.NOT_FOUND
            printed.append(banner)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert printed[0] == printed[1], "the second start reuses the dev workspace and key"
    assert not _postgres_on(tmp_path / "dev")


async def _monitor_line(proc: asyncio.subprocess.Process) -> str:
    """The line under the banner that says where the monitor listens."""
    assert proc.stdout is not None
    while line := (await asyncio.wait_for(proc.stdout.readline(), 60)).decode():
        if line.startswith("Monitor: http"):
            return line
    raise AssertionError("setu dev exited before printing its monitor's address")


async def test_a_restart_of_setu_dev_keeps_the_monitor_signed_in(
    database_url: str, tmp_path: Path
) -> None:
    port, http_port = free_port(), free_port()
    env = os.environ | {
        "SETU_DATABASE_URL": database_url,
        "SETU_HTTP_LISTEN": f"127.0.0.1:{http_port}",
        "SETU_PAGE_TOKEN_KEY": "",
    }
    saved = tmp_path / "dev" / "credentials.json"
    saved.parent.mkdir()
    saved.write_text("{}")  # as an older setu dev left it, readable by all
    saved.chmod(0o644)
    pages = []
    async with open_monitor(f"http://127.0.0.1:{http_port}") as monitor:
        for start in range(2):
            proc = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "setu_cli.main", "dev", "--no-demo"),
                *("--data-dir", str(tmp_path / "dev"), "--listen", f"127.0.0.1:{port}"),
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
            try:
                banner = await _dev_banner(proc)
                await _monitor_line(proc)
                if start == 0:
                    signed = await monitor.sign_in(banner["API key"])
                    assert signed.status == 303, await signed.text()
                pages.append((await monitor.page("/runs"))[0])
            finally:
                proc.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(proc.wait(), 30) == 0

    assert pages == [200, 200], "the second process still accepts the first one's cookie"
    assert json.loads(saved.read_text())["session_key"]
    assert saved.stat().st_mode & 0o777 == 0o600


def test_a_server_given_an_unusable_setting_says_so_and_exits_1(tmp_path: Path) -> None:
    env = dict(os.environ) | {"SETU_ADMIN_TOKEN": "short", "SETU_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "setu_server.main"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["SETU_ADMIN_TOKEN must be at least 16 characters"]
