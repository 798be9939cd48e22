"""Where each stage of a run executes (docs/flows.md): a pure function of the
two connections. A connection placed on an agent pins its stage to that
agent; anything else runs in the cloud.

| flow           | extract | load    | first task          | must be online |
| -------------- | ------- | ------- | ------------------- | -------------- |
| cloud → cloud  | worker  | worker  | migrate (cloud)     | -              |
| agent → cloud  | agent   | worker  | extract (agent)     | the agent      |
| cloud → agent  | worker  | agent   | migrate (cloud)     | the agent      |
| agent → agent  | agent A | agent B | extract (agent A)   | agent A        |
"""

from __future__ import annotations

from typing import Protocol
from uuid import UUID

from setu_server.models import Placement, RunPlacement

__all__ = ["Placed", "RunPlacement", "placement"]


class Placed(Protocol):
    @property
    def placement(self) -> Placement: ...

    @property
    def agent_id(self) -> UUID | None: ...


def _agent(connection: Placed) -> UUID | None:
    return connection.agent_id if connection.placement is Placement.AGENT else None


def placement(source: Placed, destination: Placed) -> RunPlacement:
    return RunPlacement(extract_agent=_agent(source), load_agent=_agent(destination))
