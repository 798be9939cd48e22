"""`setu admin …`: an operator's commands for workspaces, API keys and
agents, signed with the admin token (setu_client.admin.AdminClient).

Each prints the server's answer as JSON, with the field names of the
.proto as the client commands print them; an error is one line on stderr
and exits 2 (a refusal names its status: `error: ALREADY_EXISTS: …`).
`--workspace` takes a workspace's id or its name.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import setu_client as sdk
from setu_cli.command_set import CommandSet
from setu_cli.options import lazy_module, server_options

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from setu_cli import session as cli_session
    from setu_cli.session import AdminHandler, Session
    from setu_client import admin as apb

    AdminCall = Callable[[apb.AdminClient, argparse.Namespace], Awaitable[Message]]
else:
    # Imported when a command runs: `setu --help` pays for neither.
    cli_session = lazy_module("setu_cli.session")
    apb = lazy_module("setu_client.admin")


def _print(message: Message) -> None:
    # The field names of the .proto, as the client commands print them.
    print(json.dumps(sdk.message_to_dict(message), indent=2))


async def _workspace_id(admin: apb.AdminClient, ref: str) -> str:
    """A workspace's id from its id or its name (`--workspace acme`)."""
    try:
        return str(uuid.UUID(ref))
    except ValueError:
        pass
    found = [w.id for w in await admin.list_workspaces() if w.name == ref]
    if not found:
        raise cli_session.CliError(
            f"no workspace named {ref!r} (setu admin workspace list shows them)"
        )
    return found[0]


def _handler(call: AdminCall) -> AdminHandler:
    async def handler(admin: apb.AdminClient, args: argparse.Namespace, _: Session) -> int:
        if getattr(args, "workspace", ""):
            args.workspace = await _workspace_id(admin, args.workspace)
        _print(await call(admin, args))
        return 0

    return handler


async def _list_workspaces(admin: apb.AdminClient, _: argparse.Namespace) -> Message:
    return apb.ListWorkspacesResponse(workspaces=await admin.list_workspaces())


async def _list_api_keys(admin: apb.AdminClient, args: argparse.Namespace) -> Message:
    return apb.ListApiKeysResponse(api_keys=await admin.list_api_keys(args.workspace))


async def _list_agents(admin: apb.AdminClient, args: argparse.Namespace) -> Message:
    return apb.ListAgentsResponse(agents=await admin.list_agents(args.workspace))


_ACTIONS: dict[tuple[str, str], AdminCall] = {
    ("workspace", "create"): lambda admin, a: admin.create_workspace(a.name),
    ("workspace", "list"): _list_workspaces,
    ("api-key", "create"): lambda admin, a: admin.create_api_key(a.workspace, a.name),
    ("api-key", "list"): _list_api_keys,
    ("api-key", "revoke"): lambda admin, a: admin.revoke_api_key(a.id),
    ("agent", "create"): lambda admin, a: admin.create_agent(a.workspace, a.name),
    ("agent", "list"): _list_agents,
    ("agent", "deactivate"): lambda admin, a: admin.deactivate_agent(a.id),
}


def register(commands: CommandSet) -> None:
    """Adds `setu admin workspace|api-key|agent …`. The server options sit on
    `admin` and again on every leaf, so they may come before or after the
    subcommand (or before `admin`: `setu --server`)."""
    admin = commands.parser(
        "admin",
        help="manage workspaces, API keys and agents",
        description="Manage workspaces, API keys and agents. Prints the answer as JSON; "
        "an error is one line on stderr and exits 2.",
        parents=[server_options("admin_token")],
    )
    options = server_options("admin_token")

    def leaf(actions: Any, noun: str, verb: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(verb, parents=[options])
        parser.set_defaults(handler=_handler(_ACTIONS[(noun, verb)]), credential="admin_token")
        return parser

    objects = admin.add_subparsers(dest="object", required=True)
    ws = objects.add_parser("workspace").add_subparsers(dest="action", required=True)
    leaf(ws, "workspace", "create").add_argument("name")
    leaf(ws, "workspace", "list")
    for name in ("api-key", "agent"):
        actions = objects.add_parser(name).add_subparsers(dest="action", required=True)
        create = leaf(actions, name, "create")
        create.add_argument("--workspace", required=True, help="workspace id or name")
        create.add_argument("name")
        leaf(actions, name, "list").add_argument(
            "--workspace", required=True, help="workspace id or name"
        )
        verb = "revoke" if name == "api-key" else "deactivate"
        leaf(actions, name, verb).add_argument("id")
