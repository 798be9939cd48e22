"""Where each stage of a run executes (docs/flows.md): a pure function of the
two connections. A connection placed on an agent pins its stage to that
agent; anything else runs in the cloud.

| flow           | extract | load    | first task          |
| -------------- | ------- | ------- | ------------------- |
| cloud → cloud  | worker  | worker  | migrate (cloud)     |
| agent → cloud  | agent   | worker  | extract (agent)     |
| cloud → agent  | worker  | agent   | migrate (cloud)     |
| agent → agent  | agent A | agent B | extract (agent A)   |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from setu_server.models import CLOUD, Placement, TaskKind


class Placed(Protocol):
    @property
    def placement(self) -> Placement: ...

    @property
    def agent_id(self) -> UUID | None: ...


@dataclass(frozen=True)
class RunPlacement:
    extract_agent: UUID | None
    load_agent: UUID | None

    @property
    def extract_runtime(self) -> str:
        return str(self.extract_agent) if self.extract_agent else CLOUD

    @property
    def load_runtime(self) -> str:
        return str(self.load_agent) if self.load_agent else CLOUD

    @property
    def flow(self) -> str:
        ends = ("agent" if agent else "cloud" for agent in (self.extract_agent, self.load_agent))
        return " → ".join(ends)

    @property
    def first_task(self) -> TaskKind:
        """The cloud's part starts with migrate, which stages (and loads, or
        hands the load to an agent); an edge source starts with extract."""
        return TaskKind.EXTRACT if self.extract_agent else TaskKind.MIGRATE

    @property
    def first_agent(self) -> UUID | None:
        return self.extract_agent

    @property
    def cloud_touches_data(self) -> bool:
        return self.extract_agent is None or self.load_agent is None

    def to_dict(self) -> dict[str, str]:
        return {"extract": self.extract_runtime, "load": self.load_runtime, "flow": self.flow}


def _agent(connection: Placed) -> UUID | None:
    return connection.agent_id if connection.placement is Placement.AGENT else None


def placement(source: Placed, destination: Placed) -> RunPlacement:
    return RunPlacement(extract_agent=_agent(source), load_agent=_agent(destination))
