"""`setu dev`: a local server with dev credentials, the one command of
`setu` that the server package brings. setu_cli (the `setu` command)
imports this module only when `dev` runs (setu_cli/dev.py) and hands it
the arguments that follow `dev`; `setu dev env` and `setu dev secret set`
are here too."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from setu_client import SetuClient, logs
from setu_client import admin as apb
from setu_client.errors import SetuError
from setu_server import dev_secrets
from setu_server.config import Settings
from setu_server.service.secrets import TokenKind, new_secret

if TYPE_CHECKING:
    from setu_server.dev_banner import DevServer

DEV_WORKSPACE = "dev"
# The logger its lines carried while `setu dev` lived in the module setu_server.cli.
log = logging.getLogger("setu_server.cli")


# ---------------------------------------------------------------- setu dev


def _load_credentials(path: Path) -> dict[str, str]:
    return json.loads(path.read_text()) if path.exists() else {}


def _save_credentials(path: Path, credentials: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)  # it holds the admin token and the session key
    path.write_text(json.dumps(credentials, indent=2) + "\n")


async def _ensure_dev_tenant(admin: apb.AdminClient, credentials: dict[str, str]) -> dict[str, str]:
    """The dev workspace and its API key, created on first run only."""
    listed = await admin.list_workspaces()
    workspace = next((w for w in listed if w.name == DEV_WORKSPACE), None)
    if workspace is None:
        workspace = await admin.create_workspace(DEV_WORKSPACE)
    if credentials.get("workspace_id") != workspace.id or not credentials.get("api_key"):
        key = await admin.create_api_key(workspace.id, "dev")
        credentials = credentials | {"workspace_id": workspace.id, "api_key": key.secret}
    return credentials


async def _dev(args: argparse.Namespace, data_dir: Path) -> None:
    # Here, not at the top: the banner imports the demo and the database
    # driver, which a client command (`setu run --wait`) would pay for.
    from setu_server import dev_banner

    credentials_path = data_dir / "credentials.json"
    credentials = _load_credentials(credentials_path)
    made: dict[str, Callable[[], str]] = {
        "admin_token": lambda: new_secret(TokenKind.ADMIN).token,
        # Signs the monitor's sessions and page tokens: kept with the other
        # credentials, so a restart of `setu dev` keeps the browser signed in.
        "session_key": lambda: secrets.token_urlsafe(32),
    }
    missing = {name: make() for name, make in made.items() if not credentials.get(name)}
    if missing:
        credentials |= missing
        _save_credentials(credentials_path, credentials)
    secrets_path = dev_secrets.secrets_path(args, data_dir)
    dev_secrets.prepare(secrets_path)
    configured = Settings.from_env()
    settings = replace(
        configured,
        listen=args.listen,
        data_dir=data_dir,
        admin_token=credentials["admin_token"],
        # SETU_PAGE_TOKEN_KEY, when set, wins, as on any server.
        page_token_key=configured.page_token_key or credentials["session_key"],
        database_url=os.environ.get("SETU_DATABASE_URL", ""),
        # One person's machine: cloud connections may reach its files and
        # databases (a shared server keeps the restricted default).
        cloud_reach=os.environ.get("SETU_CLOUD_REACH") or "local",
        secrets_file=str(secrets_path),
        # One person reads these lines, the cloud worker's too.
        log_format="text",
    )
    logs.configure(settings.log_level, settings.log_format)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # The server's imports (its services, metrics, the engine's blob stores)
    # cost every other command half a second of start: only `dev` pays them.
    from setu_server.server import database_url, start

    async with contextlib.AsyncExitStack() as stack:
        url = await database_url(settings, stack)  # the demo's warehouse goes beside it
        running = await start(settings, url)
        stack.push_async_callback(running.stop)
        host = settings.listen.rsplit(":", 1)[0]
        address = f"{host}:{running.port}"
        admin = apb.AdminClient(address, credentials["admin_token"], call_timeout=None)
        async with admin:
            credentials = await _ensure_dev_tenant(admin, credentials)
        credentials["address"] = address  # for `setu dev env` in a later shell
        _save_credentials(credentials_path, credentials)
        dev_secrets.prepare(secrets_path, credentials["workspace_id"])
        dev = dev_banner.DevServer(
            address=address,
            workspace_id=credentials["workspace_id"],
            api_key=credentials["api_key"],
            admin_token=credentials["admin_token"],
            data_dir=data_dir,
            credentials_path=credentials_path,
            secrets_path=secrets_path,
            cloud_reach=settings.cloud_reach,
            demo=None,
        )
        if not args.no_demo:
            dev = await _with_demo(dev, settings, url)
        print(dev_banner.render(dev), flush=True)
        if running.http_url:  # the monitor, next to the grpcurl lines (docs/monitor.md)
            print(f"Monitor: {running.http_url}   (sign in with the API key above)\n", flush=True)
        await stop.wait()


def _dev_env(data_dir: Path) -> str:
    """`setu dev env`: the banner's export line, from what the last start saved."""
    credentials = _load_credentials(data_dir / "credentials.json")
    if not all(credentials.get(k) for k in ("address", "api_key", "admin_token")):
        raise SystemExit(f"error: no dev server has started in {data_dir}: run `make run` first")
    from setu_server import dev_banner  # as in _dev

    return dev_banner.export_line(
        credentials["address"], credentials["api_key"], credentials["admin_token"]
    )


async def _with_demo(dev: DevServer, settings: Settings, url: str) -> DevServer:
    """The dev server with its demo seeded (setu_server/demo.py); a demo
    that cannot be made is said in the banner, and the server serves on."""
    # Here, not at the top: every `setu` command would pay for its import.
    from setu_server import demo

    try:
        async with SetuClient(dev.address, dev.api_key) as client:
            seeded = await demo.seed(
                client,
                workspace_files=settings.files_root.resolve() / dev.workspace_id,
                database_url=url,
                secrets_file=dev.secrets_path,
                workspace_id=dev.workspace_id,
            )
    except (SetuError, OSError) as exc:
        log.error("the demo could not be set up: %s", exc)
        return replace(dev, demo_error=f"it could not be set up: {exc}")
    return replace(dev, demo=seeded)


def dev_parser() -> argparse.ArgumentParser:
    """`setu dev`'s options and subcommands (`secret`, `env`)."""
    dev = argparse.ArgumentParser(prog="setu dev")
    dev.add_argument("--data-dir", default=os.environ.get("SETU_DATA_DIR", ".setu/dev"))
    dev.add_argument("--listen", default=os.environ.get("SETU_LISTEN", "127.0.0.1:50051"))
    dev.add_argument(
        "--no-demo",
        action="store_true",
        help="do not create the demo (a SQLite shop, a PostgreSQL warehouse, pipeline `demo`)",
    )
    dev_secrets.add_secrets_file_flag(dev)
    dev_commands = dev_secrets.add_secret_commands(dev)
    env = dev_commands.add_parser(
        "env",
        help="print the export line of the dev server's address and credentials",
        description='For a new shell: eval "$(.venv/bin/setu dev env)" sets SETU_SERVER, '
        "SETU_API_KEY and SETU_ADMIN_TOKEN as the last `setu dev` printed them.",
    )
    env.add_argument("--data-dir", default=argparse.SUPPRESS)
    return dev


def run(argv: list[str], error: Callable[[str], NoReturn] | None = None) -> None:
    """Runs `setu dev ARGV…` (what follows `dev` on the command line).
    Arguments it does not know go to `error` (the `setu` parser's, so they
    read as any other command's), else to dev's own parser's."""
    parser = dev_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        (error or parser.error)(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if args.dev_command == "secret":
            dev_secrets.run_secret_command(args)
        elif args.dev_command == "env":
            print(_dev_env(Path(args.data_dir).resolve()))
        else:
            asyncio.run(_dev(args, Path(args.data_dir).resolve()))
    except SetuError as exc:
        sys.exit(f"error: {exc.code.name}: {exc.message}")
