"""What `setu dev` prints once it serves: where it is, its credentials, and
commands that run as printed, pasted into a new shell in the folder it was
started from (the repository root under `make run`), with nothing on the
PATH: the virtualenv's programs by their path, the credentials exported
first, and a job id that exists (the one `setu run` prints).

tests/e2e/test_readme.py runs every command line below the "In another
shell" heading, in order, as one bash script: an indented line is a command
(a trailing backslash continues it), an unindented one a heading."""

from __future__ import annotations

import os
import shlex
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from setu_server.demo import Demo

DEFAULT_DATA_DIR = Path(".setu/dev")
COMMANDS_HEADING = "In another shell"


@dataclass(frozen=True)
class DevServer:
    address: str
    workspace_id: str
    api_key: str
    admin_token: str
    data_dir: Path
    credentials_path: Path
    secrets_path: Path
    cloud_reach: str
    demo: Demo | None
    demo_error: str = ""


def program(name: str, cwd: Path | None = None) -> str:
    """How a new shell in `cwd` runs this installation's `name`: by its
    path relative to `cwd` when the virtualenv lies under it (`.venv/bin/setu`),
    by its bare name when the PATH already finds this one, else by its
    absolute path."""
    cwd = cwd or Path.cwd()
    installed = Path(sysconfig.get_path("scripts")) / name
    for candidate in (Path(".venv/bin") / name, _under(installed, cwd)):
        if candidate is not None and _same(cwd / candidate, installed):
            return str(candidate)
    found = shutil.which(name)
    if found and _same(Path(found), installed):
        return name
    return str(installed)


def _under(path: Path, folder: Path) -> Path | None:
    try:
        return path.relative_to(folder)
    except ValueError:
        return None


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def export_line(address: str, api_key: str, admin_token: str) -> str:
    """What a new shell needs to reach the dev server, as one command."""
    values = {"SETU_SERVER": address, "SETU_API_KEY": api_key, "SETU_ADMIN_TOKEN": admin_token}
    return "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in values.items())


def render(dev: DevServer, cwd: Path | None = None) -> str:
    cwd = cwd or Path.cwd()
    setu, grpcurl = program("setu", cwd), program("grpcurl", cwd)
    address = dev.address
    reach = (
        "cloud connections may reach anything this machine can (SETU_CLOUD_REACH=local);\n"
        "  never expose this server to other people"
        if dev.cloud_reach == "local"
        else "cloud connections reach only public addresses and their workspace's files"
    )
    data_flag = ""
    if dev.data_dir.resolve() != (cwd / DEFAULT_DATA_DIR).resolve():
        data_flag = f" --data-dir {shlex.quote(str(dev.data_dir))}"
    return f"""
Setu dev server on {address}   (Ctrl-C stops it; data in {dev.data_dir})

  workspace  {dev.workspace_id}
  API key    {dev.api_key}
  admin      {dev.admin_token}
  (saved in {dev.credentials_path})
  secrets    {setu} dev secret set NAME{data_flag}
             (into {dev.secrets_path}; used from the next task)

  {reach}

{_demo_lines(dev)}{COMMANDS_HEADING}, from {cwd} (nothing needs to be on your PATH):

  {export_line(address, dev.api_key, dev.admin_token)}
{_commands(dev, setu, grpcurl)}
The README's examples run as written in that shell.
"""


def _demo_lines(dev: DevServer) -> str:
    if dev.demo is None:
        why = dev.demo_error or "setu dev --no-demo"
        return f"No demo ({why}): create a pipeline (README.md, Moving data) and run it.\n\n"
    made = f"\n  made now: {', '.join(dev.demo.created)}" if dev.demo.created else ""
    return (
        f"Demo: pipeline `{dev.demo.pipeline}` copies a shop's customers and orders from the\n"
        f"SQLite file {dev.demo.shop}\n"
        f"into the PostgreSQL database {dev.demo.database} (upsert: run it as often as you like)."
        f"{made}\n\n"
    )


def _commands(dev: DevServer, setu: str, grpcurl: str) -> str:
    address = dev.address
    admin = f"""\
  {grpcurl} -plaintext {address} list
  {grpcurl} -plaintext {address} grpc.health.v1.Health/Check
  {grpcurl} -plaintext -H "authorization: Bearer $SETU_ADMIN_TOKEN" \\
      {address} setu.v1.AdminService/ListWorkspaces
"""
    if dev.demo is None:
        return f"  {setu} pipelines list\n{admin}"
    demo = dev.demo.pipeline
    return f"""\
  {setu} run {demo} --wait   # live progress, then what each stream moved

Then, in the same shell:

  JOB_ID=$({setu} run {demo})   # without --wait, run prints the new job's id
  {setu} jobs wait "$JOB_ID"
  {setu} jobs events "$JOB_ID"
  {grpcurl} -plaintext -H "authorization: Bearer $SETU_API_KEY" \\
      -d "{{\\"job_id\\": \\"$JOB_ID\\"}}" {address} setu.v1.JobOrchestrationService/GetJob
{admin}"""
