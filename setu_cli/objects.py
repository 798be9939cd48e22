"""setu's `connections` and `pipelines` commands: create (from a file), list,
get and delete. Their update, test, discover and preview are in changes.py,
a pipeline's saved state in state.py."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import setu_client as sdk
from setu_cli.apply import agent_id_of
from setu_cli.command_set import CommandSet
from setu_cli.inputs import (
    check_fields,
    connection_names,
    connection_ref,
    pipeline_ref,
    read_documents,
)
from setu_cli.options import lazy_module
from setu_cli.render import as_dict, connection_block, emit, enum_name, pipeline_block, table, when

if TYPE_CHECKING:
    from setu_cli import session as cli_session
    from setu_cli.session import Session
    from setu_client import SetuClient
    from setu_client.messages import Connection, Pipeline
else:
    # Imported when a command runs, not to build the parser.
    cli_session = lazy_module("setu_cli.session")

# ---------------------------------------------------------------- connections


async def _create_each(
    args: argparse.Namespace,
    kind: str,
    create: Callable[[dict[str, Any], str], Awaitable[Connection | Pipeline]],
) -> int:
    """Creates the file's objects in order, reporting each, and stops at the
    first refusal; with --json the ones made so far are still printed."""
    items = read_documents(args.file)
    made: list[dict[str, Any]] = []
    try:
        for n, item in enumerate(items, 1):
            what = f"{args.file}: {kind} {item.get('name') or n}"
            try:
                answer = await create(item, what)
            except ValueError as exc:  # the SDK's checks of enum-like fields
                raise cli_session.CliError(f"{what}: {exc}") from exc
            made.append(as_dict(answer))
            if not args.json:
                print(f"created {kind} {made[-1]['name']} ({made[-1]['id']})")
    finally:
        if args.json and made:
            print(json.dumps(made if len(items) > 1 else made[0], indent=2))
    return 0


async def connections_create(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    async def create(item: dict[str, Any], what: str) -> Connection:
        optional = ("config", "placement", "agent", "agent_id")
        check_fields(item, what, ("name", "provider"), optional)
        return await client.create_connection(
            item["name"],
            item["provider"],
            item.get("config") or {},
            item.get("placement") or "cloud",
            await agent_id_of(client, what, item),
        )

    return await _create_each(args, "connection", create)


async def connections_list(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    found = [c async for c in client.list_connections(provider=args.provider)]
    rows = [
        (
            c.name,
            c.provider,
            enum_name(sdk.Placement(c.placement)),
            c.id,
            when(c.created_at),
        )
        for c in found
    ]
    human = table(("NAME", "PROVIDER", "PLACEMENT", "ID", "CREATED"), rows)
    emit(args, {"connections": [as_dict(c) for c in found]}, human if rows else "no connections")
    return 0


async def connections_get(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    c = await connection_ref(client, args.name_or_id)
    emit(args, as_dict(c), connection_block(c))
    return 0


async def connections_delete(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    c = await connection_ref(client, args.name_or_id)
    await client.delete_connection(c.id)
    emit(args, {"deleted": c.id}, f"deleted connection {c.name} ({c.id})")
    return 0


# ---------------------------------------------------------------- pipelines

_PIPELINE_OPTIONAL = ("streams", "spec", "write_mode", "schedule", "paused")


async def pipelines_create(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    async def create(item: dict[str, Any], what: str) -> Pipeline:
        check_fields(item, what, ("name", "source", "destination"), _PIPELINE_OPTIONAL)
        streams = item.get("streams") or []
        if not isinstance(streams, list) or not all(isinstance(s, str) for s in streams):
            raise cli_session.CliError(f"{what}: streams must be a list of names")
        source = await connection_ref(client, str(item["source"]))
        destination = await connection_ref(client, str(item["destination"]))
        return await client.create_pipeline(
            item["name"],
            source.id,
            destination.id,
            streams=streams,
            spec=item.get("spec"),
            write_mode=item.get("write_mode") or "append",
            schedule=item.get("schedule") or "",
            paused=bool(item.get("paused", False)),
        )

    return await _create_each(args, "pipeline", create)


async def pipelines_list(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    found = [p async for p in client.list_pipelines()]
    names = await connection_names(client) if found and not args.json else {}
    rows = [
        (
            p.name,
            names.get(p.source_connection_id, p.source_connection_id),
            names.get(p.destination_connection_id, p.destination_connection_id),
            enum_name(sdk.WriteMode(p.write_mode)),
            p.schedule or "-",
            "paused" if p.paused else "",
            p.id,
        )
        for p in found
    ]
    headers = ("NAME", "SOURCE", "DESTINATION", "MODE", "SCHEDULE", "PAUSED", "ID")
    human = table(headers, rows) if rows else "no pipelines"
    emit(args, {"pipelines": [as_dict(p) for p in found]}, human)
    return 0


async def pipelines_get(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    p = await pipeline_ref(client, args.name_or_id)
    names = {} if args.json else await connection_names(client)
    emit(args, as_dict(p), pipeline_block(p, names))
    return 0


async def pipelines_delete(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    p = await pipeline_ref(client, args.name_or_id)
    await client.delete_pipeline(p.id)
    emit(args, {"deleted": p.id}, f"deleted pipeline {p.name} ({p.id})")
    return 0


_FILE_HELP = "YAML or JSON (by extension, else by content): one object or a list; - for stdin"


def register(commands: CommandSet) -> None:
    """Adds create, list, get and delete of connections and pipelines."""
    for noun, create, listing, get, delete in (
        ("connections", connections_create, connections_list, connections_get, connections_delete),
        ("pipelines", pipelines_create, pipelines_list, pipelines_get, pipelines_delete),
    ):
        leaves = commands.noun(noun, f"create, list, show, change and delete {noun}")
        leaves.add("create", create, f"create {noun} from a file").add_argument(
            "-f", "--file", required=True, metavar="FILE", help=_FILE_HELP
        )
        made = leaves.add("list", listing, f"list {noun}")
        if noun == "connections":
            made.add_argument("--provider", default="", help="only this provider's")
        leaves.add("get", get, f"show one of the {noun}", "NAME_OR_ID")
        leaves.add("delete", delete, f"delete one of the {noun}", "NAME_OR_ID")
