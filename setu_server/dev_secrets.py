"""The dev server's secrets: one file, `.setu/dev/secrets.json` by default,
that `setu dev` hands its cloud workers and `setu dev secret set NAME` writes
into the dev workspace's section. The workers re-read it when it changes, so
a secret set while the server runs serves the next task."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from setu_engine.errors import InvalidSecretsFile
from setu_engine.support.secrets_file import ensure_file, ensure_section, set_secret

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def add_secrets_file_flag(parser: argparse.ArgumentParser, default: Any = None) -> None:
    parser.add_argument(
        "--secrets-file",
        default=os.environ.get("SETU_SECRETS_FILE", "") if default is None else default,
        help="cloud connections' secrets, re-read when it changes "
        "(default DATA_DIR/secrets.json; env SETU_SECRETS_FILE)",
    )


def secrets_path(args: argparse.Namespace, data_dir: Path) -> Path:
    return Path(args.secrets_file).resolve() if args.secrets_file else data_dir / "secrets.json"


def prepare(path: Path, workspace: str | None = None) -> None:
    """The file exists (0600) before the workers start reading it; once the
    dev workspace is known, with its (empty) section, where its secrets go."""
    try:
        ensure_file(path)
        if workspace:
            ensure_section(path, workspace)
    except InvalidSecretsFile as exc:
        raise SystemExit(str(exc)) from exc


def add_secret_commands(dev: argparse.ArgumentParser) -> Any:
    """`setu dev secret set`; returns the subcommands, for `setu dev env`."""
    commands = dev.add_subparsers(dest="dev_command", metavar="{secret,env}")
    secret = commands.add_parser("secret", help="set a secret of the dev workspace")
    actions = secret.add_subparsers(dest="secret_action", required=True)
    set_ = actions.add_parser(
        "set",
        help="set NAME in the dev workspace's section of the secrets file; "
        "the value is read from stdin, or prompted for without echo",
    )
    set_.add_argument("name", help='what a connection config names as {"$secret": "NAME"}')
    # SUPPRESS: given before `secret` (`setu dev --data-dir X secret set N`)
    # or after it, a flag keeps its value; `setu dev`'s own defaults apply.
    set_.add_argument("--data-dir", default=argparse.SUPPRESS)
    add_secrets_file_flag(set_, argparse.SUPPRESS)
    return commands


def run_secret_command(args: argparse.Namespace) -> None:
    if not _NAME.match(args.name):
        raise SystemExit(f"error: {args.name!r}: a secret name is letters, digits and underscores")
    data_dir = Path(args.data_dir).resolve()
    credentials: dict[str, Any] = {}
    if (data_dir / "credentials.json").exists():
        credentials = json.loads((data_dir / "credentials.json").read_text())
    workspace = credentials.get("workspace_id")
    if not workspace:
        raise SystemExit(
            f"error: no dev workspace in {data_dir}: start `setu dev` once, it creates it"
        )
    value = _read_value(args.name)
    path = secrets_path(args, data_dir)
    try:
        set_secret(path, str(workspace), args.name, value)
    except InvalidSecretsFile as exc:
        raise SystemExit(f"error: {exc}") from exc
    print(
        f"secret {args.name} set for the dev workspace in {path}; "
        f"a running `setu dev` uses it from its next task"
    )


def _read_value(name: str) -> str:
    if sys.stdin.isatty():
        value = getpass.getpass(f"value of {name} (not echoed): ")
    else:
        value = sys.stdin.read()
        # `echo value | setu dev secret set NAME` means the value, not its newline.
        value = value[:-1] if value.endswith("\n") else value
        value = value[:-1] if value.endswith("\r") else value
    if not value:
        raise SystemExit(f"error: an empty value for {name}; nothing was written")
    return value
