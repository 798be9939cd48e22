"""`setu apply|delete -f FILE` and `setu export`: connections and pipelines as code.

A file (or each .yaml/.yml/.json file of a folder) holds documents of
`connections: [...]` and/or `pipelines: [...]`; a bare list of connections
or a single pipeline (the README's two examples) is read the same way.
Objects are matched by name within the workspace. The work is split so the
decisions can be tested without a server: `load` turns files into
`Declared` values, `plan` compares them with the workspace's `Current`
values and returns `Change`s, and only `execute` and the handlers call it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import setu_client as sdk
from setu_cli.command_set import CommandSet
from setu_cli.inputs import is_uuid, read_documents
from setu_cli.options import EXIT_ERROR, lazy_module
from setu_cli.render import enum_name

if TYPE_CHECKING:
    from setu_cli import session as cli_session
    from setu_cli.session import Session
    from setu_client import SetuClient
else:
    # Imported when a command runs, not to build the parser.
    cli_session = lazy_module("setu_cli.session")

_FILE_SUFFIXES = (".yaml", ".yml", ".json")
_PLACEMENTS = ("cloud", "agent")
_WRITE_MODES = ("append", "overwrite", "upsert", "merge")
_CONNECTION_KEYS = ("name", "provider", "config", "placement", "agent")
# agent_id: the older spelling of agent, read the same (a name or an id).
_CONNECTION_ALIASES = {"agent_id": "agent"}
_PIPELINE_KEYS = (
    "name",
    "source",
    "destination",
    "streams",
    "spec",
    "write_mode",
    "schedule",
    "paused",
)
# A field left out of a file means its default, so removing a line undoes it.
_CONNECTION_DEFAULTS: dict[str, Any] = {"config": {}, "placement": "cloud", "agent": ""}
_PIPELINE_DEFAULTS: dict[str, Any] = {
    "streams": [],
    "spec": {},
    "write_mode": "append",
    "schedule": "",
    "paused": False,
}

Kind = Literal["connection", "pipeline"]
Action = Literal["create", "update", "unchanged"]


@dataclass(frozen=True)
class Declared:
    """One object of a file: its fields with defaults filled in; `where`
    names the file and the entry, for errors."""

    kind: Kind
    name: str
    fields: dict[str, Any]
    where: str


@dataclass(frozen=True)
class Current:
    """One object of the workspace, in the same shape as a `Declared` one
    (a pipeline's source and destination by connection name)."""

    kind: Kind
    name: str
    id: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Change:
    kind: Kind
    name: str
    action: Action
    # field → (current value, declared value); dotted for a config or spec key
    diffs: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    where: str = ""

    def line(self) -> str:
        if self.action == "create":
            return f"+ {self.kind} {self.name}"
        if self.action == "unchanged":
            return f"= {self.kind} {self.name} (unchanged)"
        shown = "; ".join(f"{k}: {_show(a)} → {_show(b)}" for k, (a, b) in self.diffs.items())
        return f"~ {self.kind} {self.name}: {shown}"

    def as_json(self) -> dict[str, Any]:
        diffs = {k: {"from": a, "to": b} for k, (a, b) in self.diffs.items()}
        return {"kind": self.kind, "name": self.name, "action": self.action, "changes": diffs}


_ABSENT = "(none)"


def _show(value: Any) -> str:
    if isinstance(value, str) and value and value.strip() == value and " " not in value:
        return value
    return _ABSENT if value is None else json.dumps(value, sort_keys=True, ensure_ascii=False)


# ---------------------------------------------------------------- loading


def files_of(path: str) -> list[str]:
    """The file itself, or a folder's .yaml/.yml/.json files in name order."""
    folder = Path(path)
    if path != "-" and folder.is_dir():
        found = sorted(str(p) for p in folder.iterdir() if p.suffix.lower() in _FILE_SUFFIXES)
        if not found:
            raise cli_session.CliError(f"{path}: no .yaml, .yml or .json files in this folder")
        return found
    return [path]


def parse(source: str, items: Sequence[dict[str, Any]]) -> list[Declared]:
    """The objects of one file's documents, checked one by one."""
    declared: list[Declared] = []
    for n, item in enumerate(items, 1):
        if "connections" in item or "pipelines" in item:
            unknown = sorted(set(item) - {"connections", "pipelines"})
            if unknown:
                raise cli_session.CliError(
                    f"{source}: document {n}: unknown key(s) {', '.join(map(str, unknown))}; "
                    "a document holds connections and pipelines"
                )
            for kind in ("connection", "pipeline"):
                entries = item.get(f"{kind}s") or []
                if not isinstance(entries, list):
                    raise cli_session.CliError(f"{source}: {kind}s must be a list")
                declared += [_entry(source, kind, e, i) for i, e in enumerate(entries, 1)]
        elif "provider" in item:
            declared.append(_entry(source, "connection", item, n))
        elif "source" in item or "destination" in item:
            declared.append(_entry(source, "pipeline", item, n))
        else:
            raise cli_session.CliError(
                f"{source}: entry {n} is neither a connection (provider) nor a pipeline "
                "(source, destination), nor a document of connections and pipelines"
            )
    return declared


def _entry(source: str, kind: Kind, item: Any, n: int) -> Declared:
    where = f"{source}: {kind} {n}"
    if not isinstance(item, dict):
        raise cli_session.CliError(f"{where}: expected an object")
    if isinstance(item.get("name"), str) and item["name"]:
        where = f"{source}: {kind} {item['name']}"
    keys, required = (
        (_CONNECTION_KEYS, ("name", "provider"))
        if kind == "connection"
        else (_PIPELINE_KEYS, ("name", "source", "destination"))
    )
    if kind == "connection":
        item = _unalias(where, item)
    unknown = sorted(set(item) - set(keys))
    if unknown:
        raise cli_session.CliError(
            f"{where}: unknown key(s) {', '.join(map(str, unknown))}; it takes {', '.join(keys)}"
        )
    missing = [k for k in required if not item.get(k)]
    if missing:
        raise cli_session.CliError(f"{where}: missing {', '.join(missing)}")
    defaults = _CONNECTION_DEFAULTS if kind == "connection" else _PIPELINE_DEFAULTS
    fields = {k: item[k] for k in keys if k != "name" and k in item and item[k] is not None}
    fields = defaults | {k: str(v) if k in required else v for k, v in fields.items()}
    _check_values(where, fields)
    return Declared(kind, str(item["name"]), fields, where)


def _unalias(where: str, item: dict[str, Any]) -> dict[str, Any]:
    item = dict(item)
    for old, new in _CONNECTION_ALIASES.items():
        if old in item:
            if new in item:
                raise cli_session.CliError(
                    f"{where}: {old} and {new} name the same thing; keep {new}"
                )
            item[new] = item.pop(old)
    return item


def _check_values(where: str, fields: dict[str, Any]) -> None:
    def expect(ok: bool, message: str) -> None:
        if not ok:
            raise cli_session.CliError(f"{where}: {message}")

    for key in ("config", "spec"):
        expect(isinstance(fields.get(key, {}), dict), f"{key} must be an object")
    if "placement" in fields:
        expect(fields["placement"] in _PLACEMENTS, f"placement must be one of {_PLACEMENTS}")
        agent = fields["placement"] == "agent"
        expect(
            agent == bool(fields["agent"]),
            "agent (a name or an id) is needed with, and only with, placement agent",
        )
        fields["agent"] = str(fields["agent"])
    if "write_mode" in fields:
        expect(fields["write_mode"] in _WRITE_MODES, f"write_mode must be one of {_WRITE_MODES}")
        streams = fields["streams"]
        expect(
            isinstance(streams, list) and all(isinstance(s, str) for s in streams),
            "streams must be a list of names",
        )
        expect(isinstance(fields["schedule"], str), "schedule must be a string")
        expect(isinstance(fields["paused"], bool), "paused must be true or false")


def read(source: str) -> list[dict[str, Any]]:
    """The objects of a file; unlike `read_documents`, a YAML file may hold
    several documents (`---`), and a YAML error is told on one line."""
    import yaml  # here, not at the top: the CLI's start pays for no YAML

    if source == "-" or Path(source).suffix.lower() not in (".yaml", ".yml"):
        return read_documents(source)
    try:
        documents = list(yaml.safe_load_all(Path(source).read_text()))
    except OSError as exc:
        raise cli_session.CliError(f"{source}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise cli_session.CliError(
            f"{source}: not valid YAML: {' '.join(str(exc).split())}"
        ) from exc
    items = [i for d in documents if d is not None for i in (d if isinstance(d, list) else [d])]
    if not items or not all(isinstance(i, dict) for i in items):
        raise cli_session.CliError(f"{source}: expected objects, or lists of objects")
    return items


def load(path: str) -> list[Declared]:
    """Every object the file or folder declares; a name declared twice is an error."""
    declared = [d for f in files_of(path) for d in parse(f, read(f))]
    seen: dict[tuple[str, str], Declared] = {}
    for d in declared:
        if (d.kind, d.name) in seen:
            first = seen[d.kind, d.name].where
            raise cli_session.CliError(f"{d.where}: declared again (first at {first})")
        seen[d.kind, d.name] = d
    return declared


# ---------------------------------------------------------------- planning


def _diff(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Changed fields; for config and spec, the changed top-level keys."""
    diffs: dict[str, tuple[Any, Any]] = {}
    for key, new in wanted.items():
        old = current.get(key)
        if old == new:
            continue
        if key in ("config", "spec") and isinstance(old, dict) and isinstance(new, dict):
            for sub in sorted(set(old) | set(new)):
                if old.get(sub) != new.get(sub):
                    diffs[f"{key}.{sub}"] = (old.get(sub), new.get(sub))
        else:
            diffs[key] = (old, new)
    return diffs


def plan(declared: Sequence[Declared], current: Sequence[Current]) -> list[Change]:
    """What applying `declared` to a workspace holding `current` changes:
    connections first, then pipelines, each in the file's order. A pipeline's
    source and destination are connection names (declared or existing) or
    ids of existing connections; any other is an error naming the entry."""
    existing = {(c.kind, c.name): c for c in current}
    names_by_id = {c.id: c.name for c in current if c.kind == "connection"}
    declared_connections = {d.name for d in declared if d.kind == "connection"}
    changes: list[Change] = []
    for kind in ("connection", "pipeline"):
        for d in (d for d in declared if d.kind == kind):
            wanted = dict(d.fields)
            if kind == "pipeline":
                for end in ("source", "destination"):
                    ref = wanted[end]
                    if is_uuid(ref) and ref in names_by_id:
                        wanted[end] = names_by_id[ref]
                    elif ref not in declared_connections and ("connection", ref) not in existing:
                        raise cli_session.CliError(
                            f"{d.where}: {end} {ref!r} is no connection of this workspace "
                            "or of the file"
                        )
            now = existing.get((kind, d.name))
            if now is None:
                changes.append(Change(d.kind, d.name, "create", fields=wanted, where=d.where))
                continue
            diffs = _diff(now.fields, wanted)
            action: Action = "update" if diffs else "unchanged"
            changes.append(Change(d.kind, d.name, action, diffs, wanted, now.id, d.where))
    return changes


def exported(current: Iterable[Current]) -> dict[str, list[dict[str, Any]]]:
    """The workspace as a document `load` reads back unchanged: each object's
    name and the fields that differ from their defaults."""
    document: dict[str, list[dict[str, Any]]] = {"connections": [], "pipelines": []}
    for c in current:
        defaults = _CONNECTION_DEFAULTS if c.kind == "connection" else _PIPELINE_DEFAULTS
        fields = {k: v for k, v in c.fields.items() if defaults.get(k) != v}
        document[f"{c.kind}s"].append({"name": c.name, **fields})
    return document


# ---------------------------------------------------------------- agents


@dataclass(frozen=True)
class Agents:
    """The workspace's agents, id → name: how a file may name one (by name or
    id) and how a plan and an export show it (its name, or its id when
    another agent has the same name). A name is unique among active agents
    only (a replacement host takes a deactivated agent's name again), so a
    name means its active agent, or the one agent of that name if none is
    active."""

    names: Mapping[str, str]
    # The deactivated agents' ids: their names may name another agent now.
    inactive: frozenset[str] = frozenset()

    def _named(self, name: str) -> list[str]:
        ids = sorted(i for i, n in self.names.items() if n == name)
        active = [i for i in ids if i not in self.inactive]
        return active or ids

    def shown(self, agent_id: str) -> str:
        name = self.names.get(agent_id)
        if name and self._named(name) == [agent_id]:
            return name
        return agent_id

    def resolve(self, where: str, ref: str) -> str:
        """`ref` as `shown` writes it; an unknown or ambiguous name is an
        error naming the candidates. An unknown id stays: the server says so."""
        if is_uuid(ref):
            return self.shown(ref.lower())
        ids = self._named(ref)
        if len(ids) == 1:
            return ref
        if ids:
            raise cli_session.CliError(
                f"{where}: agent {ref!r} is ambiguous: {len(ids)} agents have that name "
                f"({', '.join(ids)}); name it by id"
            )
        known = ", ".join(sorted(set(self.names.values()))) or "none"
        raise cli_session.CliError(
            f"{where}: agent {ref!r} is no agent of this workspace (its agents: {known})"
        )

    def id_of(self, shown: str) -> str:
        if not shown or is_uuid(shown):
            return shown
        ids = self._named(shown)
        return ids[0] if len(ids) == 1 else shown


def with_agents(declared: Sequence[Declared], agents: Agents) -> list[Declared]:
    """`declared` with each connection's agent written as `Agents.shown` writes it."""
    resolved: list[Declared] = []
    for d in declared:
        if d.kind == "connection" and d.fields.get("agent"):
            fields = d.fields | {"agent": agents.resolve(d.where, d.fields["agent"])}
            d = Declared(d.kind, d.name, fields, d.where)
        resolved.append(d)
    return resolved


# ---------------------------------------------------------------- the workspace


async def agent_id_of(client: SetuClient, what: str, item: Mapping[str, Any]) -> str | None:
    """The agent's id an entry names by `agent` or `agent_id`, a name or an
    id (`setu connections create` and `update`); None when it names none."""
    if "agent" in item and "agent_id" in item:
        raise cli_session.CliError(f"{what}: agent_id and agent name the same thing; keep agent")
    ref = item.get("agent") or item.get("agent_id")
    if not ref:
        return None
    agents = await fetch_agents(client)
    return agents.id_of(agents.resolve(what, str(ref)))


async def fetch_agents(client: SetuClient) -> Agents:
    found = [a async for a in client.list_agents()]
    return Agents({a.id: a.name for a in found}, frozenset(a.id for a in found if not a.active))


async def fetch(client: SetuClient, agents: Agents | None = None) -> list[Current]:
    """The workspace's connections and pipelines as `Current` values."""
    agents = agents or await fetch_agents(client)
    found: list[Current] = []
    async for c in client.list_connections():
        fields: dict[str, Any] = {
            "provider": c.provider,
            "config": sdk.struct_to_dict(c.config),
            "placement": enum_name(sdk.Placement(c.placement)),
            "agent": agents.shown(c.agent_id),
        }
        found.append(Current("connection", c.name, c.id, fields))
    names = {c.id: c.name for c in found}
    async for p in client.list_pipelines():
        fields = {
            "source": names.get(p.source_connection_id, p.source_connection_id),
            "destination": names.get(p.destination_connection_id, p.destination_connection_id),
            "streams": list(p.streams),
            "spec": sdk.struct_to_dict(p.spec),
            "write_mode": enum_name(sdk.WriteMode(p.write_mode)),
            "schedule": p.schedule,
            "paused": p.paused,
        }
        found.append(Current("pipeline", p.name, p.id, fields))
    return found


@dataclass
class Writer:
    """Makes `Change`s through the SDK, for real or with validate_only. A
    pipeline validated before its new connection exists names that
    connection's fields instead of an id (the server makes it in the same
    rolled-back transaction)."""

    client: SetuClient
    agents: Agents
    # connection name → id, for pipelines; grows as connections are created
    ids: dict[str, str]
    # connection name → its create, for pipelines validated before it exists
    new: dict[str, Change] = field(default_factory=dict)

    async def make(self, change: Change, *, validate_only: bool = False) -> None:
        f = change.fields
        changed = {k.split(".")[0] for k in change.diffs}
        if change.kind == "connection":
            agent_id = self.agents.id_of(f["agent"]) or None
            if change.action == "create":
                made = await self.client.create_connection(
                    change.name,
                    f["provider"],
                    f["config"],
                    f["placement"],
                    agent_id,
                    validate_only=validate_only,
                )
                if not validate_only:
                    self.ids[change.name] = made.id
                return
            updates = {k: f[k] for k in changed - {"agent"}}
            if changed & {"placement", "agent"}:  # the server checks the pair together
                updates |= {"placement": f["placement"], "agent_id": agent_id or ""}
            await self.client.update_connection(change.id, validate_only=validate_only, **updates)
            return
        stand_ins: dict[str, Any] = {}
        ends: dict[str, str] = {}
        for end in ("source", "destination"):
            ref = f[end]
            if ref in self.ids or is_uuid(ref) or not validate_only:
                ends[end] = self.ids.get(ref, ref)
            else:
                ends[end] = ""
                stand_ins[f"new_{end}"] = self._draft(self.new[ref])
        if change.action == "create":
            await self.client.create_pipeline(
                change.name,
                ends["source"],
                ends["destination"],
                streams=f["streams"],
                spec=f["spec"],
                write_mode=f["write_mode"],
                schedule=f["schedule"],
                paused=f["paused"],
                validate_only=validate_only,
                **stand_ins,
            )
            return
        updates = {k: f[k] for k in changed - {"source", "destination"}}
        for end in changed & {"source", "destination"}:
            updates[f"{end}_connection_id"] = ends[end]
        if validate_only:
            # A stand-in is judged only where the update names it.
            named = {f"new_{end}" for end in changed & {"source", "destination"}}
            stand_ins = {k: v for k, v in stand_ins.items() if k in named}
        await self.client.update_pipeline(
            change.id, validate_only=validate_only, **stand_ins, **updates
        )

    def _draft(self, change: Change) -> dict[str, Any]:
        f = change.fields
        return {
            "name": change.name,
            "provider": f["provider"],
            "config": f["config"],
            "placement": f["placement"],
            "agent_id": self.agents.id_of(f["agent"]),
        }


@dataclass(frozen=True)
class Verdict:
    """The server's answer to one change sent with validate_only."""

    change: Change
    # the server's refusal, "" when it would accept the change
    refused: str = ""
    # why it was not sent: a connection it needs is refused
    unchecked: str = ""


async def validate(writer: Writer, changes: Sequence[Change]) -> list[Verdict]:
    """Every change that would write, sent with validate_only, in order. A
    pipeline whose new connection is refused is not sent (it could only
    repeat that connection's refusal)."""
    verdicts: list[Verdict] = []
    refused: set[str] = set()
    for change in (c for c in changes if c.action != "unchanged"):
        if change.kind == "pipeline":
            blocked = [change.fields[e] for e in ("source", "destination")]
            blocked = [name for name in blocked if name in refused]
            if blocked:
                why = f"its connection {blocked[0]} is refused"
                verdicts.append(Verdict(change, unchecked=why))
                continue
        try:
            await writer.make(change, validate_only=True)
        except sdk.Unavailable:
            raise
        except sdk.SetuError as exc:
            verdicts.append(Verdict(change, refused=exc.message))
            if change.kind == "connection":
                refused.add(change.name)
            continue
        verdicts.append(Verdict(change))
        if change.kind == "connection" and change.action == "create":
            writer.new[change.name] = change
    return verdicts


def _label(change: Change) -> str:
    return f"{change.kind} {change.name}"


def _say_refused(
    args: argparse.Namespace, changes: Sequence[Change], verdicts: Sequence[Verdict]
) -> int:
    """The refusals (stderr, one line each, the same for a dry run and an
    apply) and what was written: nothing."""
    bad = [v for v in verdicts if v.refused]
    for v in bad:
        print(f"error: {v.change.where}: {v.refused}", file=sys.stderr)
    unchecked = [f"{_label(v.change)} ({v.unchecked})" for v in verdicts if v.unchecked]
    counted = f"{len(bad)} of {len(verdicts)} change(s) refused"
    if unchecked:
        counted += f"; not checked: {', '.join(unchecked)}"
    if args.json:
        refusals = [
            {
                "kind": v.change.kind,
                "name": v.change.name,
                "where": v.change.where,
                "message": v.refused or v.unchecked,
            }
            for v in verdicts
            if v.refused or v.unchecked
        ]
        document = {"changes": [c.as_json() for c in changes], "applied": False}
        _report(args, [], document | {"refused": refusals})
    elif args.dry_run:
        print(f"dry run: {counted}; nothing changed")
    else:
        print(f"nothing was applied: {counted}")
    return EXIT_ERROR


async def execute(writer: Writer, changes: Sequence[Change], args: argparse.Namespace) -> int:
    """Makes the validated changes in order (connections before pipelines).
    A write refused or lost midway stops there and says what was applied,
    what was not, and that applying again finishes the work."""
    pending = [c for c in changes if c.action != "unchanged"]
    for n, change in enumerate(pending):
        try:
            await writer.make(change)
        except sdk.SetuError as exc:
            done = [_label(c) for c in pending[:n]]
            left = [_label(c) for c in pending[n:]]
            print(f"error: {change.where}: {exc.message}", file=sys.stderr)
            print(f"applied: {', '.join(done) or 'nothing'}", file=sys.stderr)
            print(f"not applied: {', '.join(left)}", file=sys.stderr)
            print(
                "apply changes only what differs from the workspace, so running it "
                f"again finishes the work: setu apply -f {args.file}",
                file=sys.stderr,
            )
            if args.json:
                document = {"changes": [c.as_json() for c in changes], "applied": False}
                _report(args, [], document | {"applied_changes": done, "not_applied": left})
            return EXIT_ERROR
    return 0


# ---------------------------------------------------------------- commands


def _report(args: argparse.Namespace, lines: list[str], document: dict[str, Any]) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False) if args.json else "\n".join(lines))


async def apply_command(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    """Plans locally, has the server validate every change (validate_only),
    and writes only when all of them pass: `--dry-run` stops after the
    validation, so the plan and the apply give the same verdicts."""
    declared = load(args.file)
    agents = await fetch_agents(client)
    declared = with_agents(declared, agents)
    current = await fetch(client, agents)
    changes = plan(declared, current)
    pending = any(c.action != "unchanged" for c in changes)
    if not args.json:
        print("\n".join(c.line() for c in changes) or "nothing declared", flush=True)
    writer = Writer(client, agents, {c.name: c.id for c in current if c.kind == "connection"})
    verdicts = await validate(writer, changes)
    if any(v.refused or v.unchecked for v in verdicts):
        return _say_refused(args, changes, verdicts)
    if pending and not args.dry_run:
        code = await execute(writer, changes, args)
        if code:
            return code
    if args.json:
        applied = pending and not args.dry_run
        _report(args, [], {"changes": [c.as_json() for c in changes], "applied": applied})
    elif args.dry_run and pending:
        print("dry run: nothing changed")
    return 0


async def delete_command(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    declared = load(args.file)
    existing = {(c.kind, c.name): c for c in await fetch(client)}
    lines: list[str] = []
    results: list[dict[str, Any]] = []
    for kind in ("pipeline", "connection"):  # a connection in use cannot go first
        for d in (d for d in declared if d.kind == kind):
            found = existing.get((kind, d.name))
            if found and not args.dry_run:
                try:
                    if kind == "pipeline":
                        await client.delete_pipeline(found.id)
                    else:
                        await client.delete_connection(found.id)
                except sdk.NotFound:
                    found = None  # gone meanwhile: the outcome asked for
            lines.append(f"- {kind} {d.name}" if found else f"= {kind} {d.name} (not found)")
            results.append({"kind": kind, "name": d.name, "found": bool(found)})
    if args.dry_run and not args.json:
        lines.append("dry run: nothing deleted")
    _report(args, lines, {"objects": results, "deleted": not args.dry_run})
    return 0


async def export_command(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    import yaml  # here, not at the top: the CLI's start pays for no YAML

    document = exported(await fetch(client))
    if args.json:
        print(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        print(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), end="")
    return 0


def register(commands: CommandSet) -> None:
    """Adds apply, delete and export."""
    file_help = "a YAML or JSON file, or a folder of them; - for stdin"
    for name, handler, help in (
        ("apply", apply_command, "create or update the connections and pipelines a file declares"),
        ("delete", delete_command, "delete the pipelines and connections a file declares"),
    ):
        parser = commands.command(name, handler, help)
        parser.add_argument("-f", "--file", required=True, metavar="FILE", help=file_help)
        parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    help = "print the workspace's connections and pipelines as a file apply reads"
    commands.command("export", export_command, help)
