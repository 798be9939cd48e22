"""setu's commands that change or probe what exists: `connections update|
test|discover|preview` and `pipelines update`.

An update takes the fields to change from a file (`-f`, YAML or JSON, as
create reads) and/or `--set key=value` (the value read as YAML, so
`paused=true` is a boolean and `streams=[a, b]` a list); a dotted key
(`config.host=…`, `spec.primary_key.users=[id]`) changes one entry of a
mapping field and keeps the rest. Only the fields named are sent, in the
update mask; the server checks the result as a whole.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Protocol

import setu_client as sdk
from setu_cli.apply import agent_id_of
from setu_cli.command_set import CommandSet
from setu_cli.inputs import connection_ref, pipeline_ref, read_documents
from setu_cli.options import EXIT_FAILED, lazy_module
from setu_cli.render import as_dict, connection_block, emit, pipeline_block, table

if TYPE_CHECKING:
    from setu_cli import session as cli_session
    from setu_cli.session import Session
    from setu_client import SetuClient, messages
else:
    # Imported when a command runs, not to build the parser.
    cli_session = lazy_module("setu_cli.session")
    messages = lazy_module("setu_client.messages")

# agent and agent_id alike take an agent's name or id.
_CONNECTION_FIELDS = ("name", "provider", "config", "placement", "agent", "agent_id")
# A file names connections by name, as create takes them; the SDK wants ids.
_PIPELINE_FIELDS = {
    "name": "name",
    "source": "source_connection_id",
    "destination": "destination_connection_id",
    "streams": "streams",
    "spec": "spec",
    "write_mode": "write_mode",
    "schedule": "schedule",
    "paused": "paused",
}
_MAPPINGS = ("config", "spec")


def _assignment(text: str) -> tuple[list[str], Any]:
    import yaml  # here, not at the top: the CLI's start pays for no YAML

    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise cli_session.CliError(f"--set {text}: expected key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise cli_session.CliError(f"--set {text}: the value is not valid YAML: {exc}") from exc
    return key.strip().split("."), value


def changes_of(
    args: argparse.Namespace, allowed: tuple[str, ...], current: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The fields to change: the file's, then each --set over them. `current`
    holds the mapping fields as they are, which a dotted key edits."""
    changes: dict[str, Any] = {}
    if args.file:
        documents = read_documents(args.file)
        if len(documents) != 1:
            raise cli_session.CliError(
                f"{args.file}: an update takes one object, not {len(documents)}"
            )
        changes.update(documents[0])
    for text in args.set:
        path, value = _assignment(text)
        if len(path) == 1:
            changes[path[0]] = value
            continue
        if path[0] not in _MAPPINGS:
            raise cli_session.CliError(
                f"--set {text}: only {' and '.join(_MAPPINGS)} take dotted keys"
            )
        mapping = changes.setdefault(path[0], dict(current.get(path[0], {})))
        for part in path[1:-1]:
            inner = mapping.get(part)
            mapping[part] = dict(inner) if isinstance(inner, dict) else {}
            mapping = mapping[part]
        mapping[path[-1]] = value
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise cli_session.CliError(
            f"unknown field(s) {', '.join(unknown)}; an update takes {', '.join(allowed)}"
        )
    if not changes:
        raise cli_session.CliError("nothing to change: give -f FILE and/or --set key=value")
    return changes


def _changed(kind: str, name: str, ident: str, fields: list[str]) -> str:
    return f"updated {kind} {name} ({ident}): {', '.join(fields)}"


async def connections_update(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    found = await connection_ref(client, args.name_or_id)
    changes = changes_of(args, _CONNECTION_FIELDS, {"config": sdk.struct_to_dict(found.config)})
    if "agent" in changes or "agent_id" in changes:
        named: dict[str, Any] = {k: changes.pop(k) for k in ("agent", "agent_id") if k in changes}
        changes["agent_id"] = await agent_id_of(client, "agent", named) or ""
    try:
        updated = await client.update_connection(found.id, **changes)
    except ValueError as exc:  # the SDK's checks of enum-like fields
        raise cli_session.CliError(str(exc)) from exc
    human = _changed("connection", updated.name, updated.id, list(changes))
    emit(args, as_dict(updated), f"{human}\n\n{connection_block(updated)}")
    return 0


async def pipelines_update(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    found = await pipeline_ref(client, args.name_or_id)
    changes = changes_of(args, tuple(_PIPELINE_FIELDS), {"spec": sdk.struct_to_dict(found.spec)})
    fields: dict[str, Any] = {}
    for key, value in changes.items():
        if key in ("source", "destination"):
            value = (await connection_ref(client, str(value))).id
        elif key == "streams" and (
            not isinstance(value, list) or not all(isinstance(s, str) for s in value)
        ):
            raise cli_session.CliError("streams must be a list of names")
        fields[_PIPELINE_FIELDS[key]] = value
    try:
        updated = await client.update_pipeline(found.id, **fields)
    except ValueError as exc:
        raise cli_session.CliError(str(exc)) from exc
    names = {} if args.json else {c.id: c.name async for c in client.list_connections()}
    human = _changed("pipeline", updated.name, updated.id, list(changes))
    emit(args, as_dict(updated), f"{human}\n\n{pipeline_block(updated, names)}")
    return 0


async def connections_test(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    """Exit 0 when the connection works, 1 when the test ran and failed."""
    found = await connection_ref(client, args.name_or_id)
    tested = await client.test_connection(found.id, timeout_seconds=args.timeout)
    verdict = "ok" if tested.ok else "failed"
    human = f"{verdict}: {tested.message}\n(tested on {_ran_on(tested)}; job {tested.job_id})"
    emit(args, as_dict(tested), human)
    return 0 if tested.ok else EXIT_FAILED


async def connections_discover(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    found = await connection_ref(client, args.name_or_id)
    answer = await client.discover_streams(found.id, timeout_seconds=args.timeout)
    rows = [
        (
            f"{s.namespace}.{s.name}" if s.namespace else s.name,
            str(len(s.columns)),
            ", ".join(s.primary_key) or "-",
            f"{s.row_estimate:,}" if s.row_estimate else "-",
            _status(s.status),
        )
        for s in answer.streams
    ]
    human = table(("STREAM", "COLUMNS", "PRIMARY KEY", "ROWS (EST.)", "STATUS"), rows)
    emit(args, as_dict(answer), (human if rows else "no streams") + _on_agent("discovered", answer))
    return 0


class _Ran(Protocol):
    runtime: str
    runtime_label: str
    job_id: str


def _ran_on(answer: _Ran) -> str:
    """Where an operation ran as people read it ("cloud", "agent edge-1");
    the bare runtime from a server that sends no label."""
    return answer.runtime_label or answer.runtime


def _on_agent(done: str, answer: _Ran) -> str:
    """A last line naming the agent that answered; none for the cloud, the default."""
    if answer.runtime == "cloud":
        return ""
    return f"\n({done} on {_ran_on(answer)}; job {answer.job_id})"


def _status(status: int) -> str:
    """CATALOG_STATUS_ACTIVE → active."""
    enum = messages.CatalogStream.DESCRIPTOR.fields_by_name["status"].enum_type
    assert enum is not None  # an enum field has its enum's descriptor
    name: str = enum.values_by_number[status].name
    return "-" if status == 0 else name.removeprefix("CATALOG_STATUS_").lower()


async def connections_preview(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    found = await connection_ref(client, args.name_or_id)
    answer = await client.preview_stream(
        found.id, args.stream, limit=args.limit, timeout_seconds=args.timeout
    )
    headers = [c.name for c in answer.columns]
    rows = []
    for row in answer.rows:
        values = sdk.struct_to_dict(row)
        rows.append(["null" if values.get(h) is None else str(values[h]) for h in headers])
    human = table(headers, rows) if headers else "no columns"
    human = human if rows else f"{human}\n(no rows)"
    emit(args, as_dict(answer), human + _on_agent("previewed", answer))
    return 0


def register(commands: CommandSet) -> None:
    """Adds update (both nouns) and test, discover and preview (connections),
    after objects.py's commands."""
    for noun, handler in (("connections", connections_update), ("pipelines", pipelines_update)):
        update = commands.leaves(noun).add(
            "update", handler, f"change fields of one of the {noun}", "NAME_OR_ID"
        )
        update.add_argument(
            "-f", "--file", metavar="FILE", help="one object of the fields to change (as create)"
        )
        update.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="change one field (value read as YAML); config.KEY / spec.KEY change one entry",
        )
    timeout: dict[str, Any] = {
        "type": int,
        "default": 0,
        "metavar": "S",
        "help": "wait at most S s (30)",
    }
    connections = commands.leaves("connections")
    made = connections.add(
        "test",
        connections_test,
        "test a connection where it is placed (exit 1: failed)",
        "NAME_OR_ID",
    )
    made.add_argument("--timeout", **timeout)
    made = connections.add(
        "discover", connections_discover, "list the streams a connection offers", "NAME_OR_ID"
    )
    made.add_argument("--timeout", **timeout)
    made = connections.add(
        "preview", connections_preview, "show the first rows of a stream", "NAME_OR_ID", "STREAM"
    )
    made.add_argument("--limit", type=int, default=20, metavar="N", help="at most N rows (20)")
    made.add_argument("--timeout", **timeout)
