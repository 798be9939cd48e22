"""`setu pipelines state NAME` and `setu pipelines reset-state NAME
[--stream S]`: the saved cursor of each incremental stream, shown and
forgotten (docs/pipelines.md, "Incremental streams")."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from setu_cli.command_set import CommandSet
from setu_cli.inputs import pipeline_ref
from setu_cli.render import as_dict, emit, table

if TYPE_CHECKING:
    from setu_cli.session import Session
    from setu_client import SetuClient


async def pipelines_state(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    p = await pipeline_ref(client, args.name_or_id)
    state = await client.get_pipeline_state(p.id)
    rows = [
        (
            s.stream,
            s.cursor.column,
            shown(s.cursor),
            str(s.rows),
            s.last_job_id or "-",
            s.updated_at.ToDatetime().isoformat(sep=" ", timespec="seconds"),
        )
        for s in state.streams
    ]
    headers = ("STREAM", "CURSOR", "VALUE", "ROWS", "LAST JOB", "UPDATED")
    human = table(headers, rows) if rows else f"pipeline {p.name}: no saved state (full reads)"
    emit(args, as_dict(state), human)
    return 0


def shown(cursor: Any) -> str:
    """A cursor's value; a file stream's objects (JSON) as a summary:
    "2 files, last modified 2026-…"."""
    if cursor.type != "files":
        return str(cursor.value)
    try:
        mark = json.loads(cursor.value)
        count, modified = len(mark["objects"]), mark["modified"]
    except (ValueError, KeyError, TypeError):
        return str(cursor.value)
    return f"{count} file{'' if count == 1 else 's'}, last modified {modified}"


async def pipelines_reset_state(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    p = await pipeline_ref(client, args.name_or_id)
    reset = await client.reset_pipeline_state(p.id, args.stream)
    said = ", ".join(reset) if reset else "nothing (no saved state)"
    emit(
        args,
        {"pipeline": p.id, "reset": reset},
        f"reset {said}: the next run of {p.name} reads it in full",
    )
    return 0


def register(commands: CommandSet) -> None:
    """Adds `pipelines state` and `pipelines reset-state` (after objects.py's)."""
    leaves = commands.leaves("pipelines")
    leaves.add(
        "state", pipelines_state, "show the saved cursor of each incremental stream", "NAME_OR_ID"
    )
    leaves.add(
        "reset-state",
        pipelines_reset_state,
        "forget saved cursors: the next run reads those streams in full",
        "NAME_OR_ID",
    ).add_argument("--stream", default="", metavar="S", help="only this stream (default: all)")
