"""setu: the command line. `setu dev` runs a local server with dev credentials;
`setu admin …` manages workspaces, API keys and agents on a running server;
`setu connections|pipelines|run|jobs …` are a client's commands (the setu_cli
package, which needs only the SDK)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import Message

from setu_cli.main import add_client_commands
from setu_cli.session import (
    EXIT_CODES_HELP,
    CliError,
    file_error,
    fill_defaults,
    one_line_error,
    run_command,
    server_options,
)
from setu_client import SetuClient, logs, message_to_dict
from setu_client import admin as apb
from setu_client.channel import open_channel
from setu_client.diagnose import cause_of
from setu_client.errors import SetuError, from_rpc_error
from setu_client.tls import tls_from_options
from setu_server import dev_secrets
from setu_server.config import Settings
from setu_server.service.secrets import TokenKind, new_secret

if TYPE_CHECKING:
    from setu_server.dev_banner import DevServer

DEV_WORKSPACE = "dev"
log = logging.getLogger(__name__)


# ---------------------------------------------------------------- setu dev


def _load_credentials(path: Path) -> dict[str, str]:
    return json.loads(path.read_text()) if path.exists() else {}


def _save_credentials(path: Path, credentials: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(json.dumps(credentials, indent=2) + "\n")


async def _ensure_dev_tenant(
    admin: apb.AdminServiceAsyncStub, credentials: dict[str, str]
) -> dict[str, str]:
    """The dev workspace and its API key, created on first run only."""
    listed = await admin.ListWorkspaces(apb.ListWorkspacesRequest())
    workspace = next((w for w in listed.workspaces if w.name == DEV_WORKSPACE), None)
    if workspace is None:
        workspace = await admin.CreateWorkspace(apb.CreateWorkspaceRequest(name=DEV_WORKSPACE))
    if credentials.get("workspace_id") != workspace.id or not credentials.get("api_key"):
        key = await admin.CreateApiKey(
            apb.CreateApiKeyRequest(workspace_id=workspace.id, name="dev")
        )
        credentials = credentials | {"workspace_id": workspace.id, "api_key": key.secret}
    return credentials


async def _dev(args: argparse.Namespace, data_dir: Path) -> None:
    # Here, not at the top: the banner imports the demo and the database
    # driver, which a client command (`setu run --wait`) would pay for.
    from setu_server import dev_banner

    credentials_path = data_dir / "credentials.json"
    credentials = _load_credentials(credentials_path)
    if not credentials.get("admin_token"):
        credentials["admin_token"] = new_secret(TokenKind.ADMIN).token
        _save_credentials(credentials_path, credentials)
    secrets_path = dev_secrets.secrets_path(args, data_dir)
    dev_secrets.prepare(secrets_path)
    settings = replace(
        Settings.from_env(),
        listen=args.listen,
        data_dir=data_dir,
        admin_token=credentials["admin_token"],
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
        async with open_channel(address, credentials["admin_token"]) as channel:
            credentials = await _ensure_dev_tenant(apb.AdminServiceStub(channel), credentials)
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


# ---------------------------------------------------------------- setu admin


def _print(message: Message) -> None:
    # The field names of the .proto, as the client commands print them.
    print(json.dumps(message_to_dict(message), indent=2))


async def _admin_call(
    args: argparse.Namespace,
    call: Callable[[apb.AdminServiceAsyncStub], Awaitable[Message]],
) -> None:
    token = args.admin_token or os.environ.get("SETU_ADMIN_TOKEN", "")
    if not token:
        raise CliError("an admin token is required (--admin-token or SETU_ADMIN_TOKEN)")
    try:
        tls = tls_from_options(args)
    except (OSError, ValueError) as exc:
        raise CliError(f"TLS: {file_error(exc)}") from None
    async with open_channel(args.server, token, tls=tls) as channel:
        try:
            stub = apb.AdminServiceStub(channel)
            if getattr(args, "workspace", ""):
                args.workspace = await _workspace_id(stub, args.workspace)
            _print(await call(stub))
        except grpc.aio.AioRpcError as exc:
            error = from_rpc_error(exc)
            if cause_of(error, tls=tls is not None) is not None:
                raise CliError(one_line_error(error, args.server, tls)) from None
            raise CliError(f"{error.code.name}: {error.message}") from None


async def _workspace_id(admin: apb.AdminServiceAsyncStub, ref: str) -> str:
    """A workspace's id from its id or its name (`--workspace acme`)."""
    try:
        return str(uuid.UUID(ref))
    except ValueError:
        pass
    listed = await admin.ListWorkspaces(apb.ListWorkspacesRequest())
    found = [w.id for w in listed.workspaces if w.name == ref]
    if not found:
        raise CliError(f"no workspace named {ref!r} (setu admin workspace list shows them)")
    return found[0]


_ADMIN_ACTIONS: dict[tuple[str, str], Callable[[Any, argparse.Namespace], Awaitable[Message]]] = {
    ("workspace", "create"): lambda s, a: s.CreateWorkspace(
        apb.CreateWorkspaceRequest(name=a.name)
    ),
    ("workspace", "list"): lambda s, a: s.ListWorkspaces(apb.ListWorkspacesRequest()),
    ("api-key", "create"): lambda s, a: s.CreateApiKey(
        apb.CreateApiKeyRequest(workspace_id=a.workspace, name=a.name)
    ),
    ("api-key", "list"): lambda s, a: s.ListApiKeys(
        apb.ListApiKeysRequest(workspace_id=a.workspace)
    ),
    ("api-key", "revoke"): lambda s, a: s.RevokeApiKey(apb.RevokeApiKeyRequest(api_key_id=a.id)),
    ("agent", "create"): lambda s, a: s.CreateAgent(
        apb.CreateAgentRequest(workspace_id=a.workspace, name=a.name)
    ),
    ("agent", "list"): lambda s, a: s.ListAgents(apb.ListAgentsRequest(workspace_id=a.workspace)),
    ("agent", "deactivate"): lambda s, a: s.DeactivateAgent(
        apb.DeactivateAgentRequest(agent_id=a.id)
    ),
}


def _admin_parser(sub: Any) -> None:
    admin = sub.add_parser(
        "admin",
        help="manage workspaces, API keys and agents",
        description="Manage workspaces, API keys and agents. Prints the answer as JSON; "
        "an error is one line on stderr and exits 2.",
        parents=[server_options("admin_token")],
    )
    leaf = {"parents": [server_options("admin_token")]}
    objects = admin.add_subparsers(dest="object", required=True)
    ws = objects.add_parser("workspace").add_subparsers(dest="action", required=True)
    ws.add_parser("create", **leaf).add_argument("name")
    ws.add_parser("list", **leaf)
    for name in ("api-key", "agent"):
        actions = objects.add_parser(name).add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", **leaf)
        create.add_argument("--workspace", required=True, help="workspace id or name")
        create.add_argument("name")
        actions.add_parser("list", **leaf).add_argument(
            "--workspace", required=True, help="workspace id or name"
        )
        verb = "revoke" if name == "api-key" else "deactivate"
        actions.add_parser(verb, **leaf).add_argument("id")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="setu",
        description=__doc__,
        parents=[server_options()],
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    dev = sub.add_parser("dev", help="run a local server with dev credentials")
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
    _admin_parser(sub)
    add_client_commands(sub)
    args = parser.parse_args(argv)
    if hasattr(args, "handler"):
        sys.exit(run_command(args))
    try:
        if args.command == "dev" and args.dev_command == "secret":
            dev_secrets.run_secret_command(args)
        elif args.command == "dev" and args.dev_command == "env":
            print(_dev_env(Path(args.data_dir).resolve()))
        elif args.command == "dev":
            asyncio.run(_dev(args, Path(args.data_dir).resolve()))
        elif args.command == "admin":
            fill_defaults(args, "admin_token")
            action = _ADMIN_ACTIONS[(args.object, args.action)]
            asyncio.run(_admin_call(args, lambda stub: action(stub, args)))
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except SetuError as exc:
        sys.exit(f"error: {exc.code.name}: {exc.message}")


if __name__ == "__main__":
    main()
