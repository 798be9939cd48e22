"""setu's `agents` commands: the workspace's agents, whether each is online
(the server's verdict, the one that decides whether a run placed on it is
accepted), when it was last seen, and what it runs now."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from setu_cli.command_set import CommandSet
from setu_cli.render import as_dict, emit, table, when

if TYPE_CHECKING:
    from setu_cli.session import Session
    from setu_client import Agent, SetuClient


def _running(agent: Agent) -> str:
    """The tasks it holds: `extract job <id>`, one per task."""
    held = [f"{t.kind} job {t.job_id}" for t in agent.running]
    return ", ".join(held) or "-"


def agents_table(agents: list[Agent]) -> str:
    rows = [
        (
            a.name,
            a.status,
            when(a.signed_off_at if a.status == "stopped" else a.last_seen_at),
            _running(a),
            str(a.queued_tasks),
            a.hostname or "-",
            a.version or "-",
            a.id,
        )
        for a in agents
    ]
    headers = ("NAME", "STATUS", "SEEN", "RUNNING", "QUEUED", "HOST", "VERSION", "ID")
    return table(headers, rows) if rows else "no agents"


async def agents_list(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    found = [a async for a in client.list_agents()]
    emit(args, {"agents": [as_dict(a) for a in found]}, agents_table(found))
    return 0


def register(commands: CommandSet) -> None:
    """Adds `setu agents list`."""
    leaves = commands.noun("agents", "the workspace's agents and whether they are online")
    leaves.add(
        "list",
        agents_list,
        "list agents: status (online, offline, stopped, deactivated), last seen, tasks held",
    )
