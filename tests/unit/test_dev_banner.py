"""How `setu dev`'s banner names programs and what it prints without a demo
(tests/e2e/test_readme.py runs a real banner's commands)."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from setu_server import dev_banner
from setu_server.demo import Demo

SCRIPTS = Path(sysconfig.get_path("scripts"))


def test_a_program_is_named_as_a_new_shell_in_that_folder_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(SCRIPTS.parent, target_is_directory=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert dev_banner.program("setu", clone) == ".venv/bin/setu"
    assert dev_banner.program("grpcurl", clone) == ".venv/bin/grpcurl"
    assert dev_banner.program("setu", elsewhere) == str(SCRIPTS / "setu")
    assert dev_banner.program("setu", SCRIPTS.parent) == "bin/setu"
    monkeypatch.setenv("PATH", f"/usr/bin:{SCRIPTS}")
    assert dev_banner.program("setu", elsewhere) == "setu"


def server(demo: Demo | None, data_dir: Path) -> dev_banner.DevServer:
    return dev_banner.DevServer(
        address="127.0.0.1:50051",
        workspace_id="0b6f3a1e-0000-4000-8000-00000000000a",
        api_key="setu_ak_k",
        admin_token="setu_adm_t",
        data_dir=data_dir,
        credentials_path=data_dir / "credentials.json",
        secrets_path=data_dir / "secrets.json",
        cloud_reach="local",
        demo=demo,
        demo_error="it could not be set up: boom" if demo is None else "",
    )


def commands(banner: str) -> list[str]:
    after = banner.split(dev_banner.COMMANDS_HEADING, 1)[1].splitlines()[1:]
    return [line.strip() for line in after if line.startswith("  ")]


def test_the_banner_exports_first_and_runs_the_demo_by_the_id_run_prints(tmp_path: Path) -> None:
    demo = Demo("demo", tmp_path / "shop.db", "setu_demo_warehouse", ())
    banner = dev_banner.render(server(demo, tmp_path / ".setu" / "dev"), tmp_path)

    lines = commands(banner)
    assert lines[0] == (
        "export SETU_SERVER=127.0.0.1:50051 SETU_API_KEY=setu_ak_k SETU_ADMIN_TOKEN=setu_adm_t"
    )
    assert lines[1].startswith(f"{SCRIPTS / 'setu'} run demo --wait")
    assert lines[2].startswith(f"JOB_ID=$({SCRIPTS / 'setu'} run demo)")
    assert '-d "{\\"job_id\\": \\"$JOB_ID\\"}"' in banner
    assert "made now" not in banner and "--data-dir" not in banner  # the default folder


def test_without_a_demo_the_banner_says_why_and_runs_nothing_of_it(tmp_path: Path) -> None:
    banner = dev_banner.render(server(None, tmp_path / "data"), tmp_path)

    assert "No demo (it could not be set up: boom)" in banner
    assert not any("demo" in line or "JOB_ID" in line for line in commands(banner))
    assert f"dev secret set NAME --data-dir {tmp_path / 'data'}" in banner
