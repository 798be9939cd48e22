"""Agents by name wherever a person reads which runtime did something.

The machine-readable forms stay ids: a job's `extract_runtime` is "cloud" or
"agent:<id>", a task's queue and a run's placement are "cloud" or "<id>", and
the event texts and error messages the server writes name an agent as
"agent:<id>". Answers for people are rendered when read, from one look-up of
the agents an answer names (`names_for`): `agent edge-1`; with the short id
when another agent of the workspace has a name that reads the same
(`agent edge-1 (4f154cbd)`); `agent 4f154cbd (deleted)` when the id names no
agent of the workspace any more.

Rendering at read time, not at write time: the stored text keeps the id,
which never changes and never names another agent, while the reading moment
knows what a name means now (a second agent of that name since, an agent
gone); texts written before names were shown read by name too; and the
paths that write events (a lease in a group commit, the reaper) stay free of
a name look-up.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from uuid import UUID

from setu_server.models import CLOUD, Agent, AgentName, Job, JobEvent
from setu_server.store import tenancy
from setu_server.store.db import Executor

# How much of an id a label shows beside a name (or instead of a lost one).
SHORT_ID = 8
AGENT_PREFIX = "agent:"
# "agent:<id>" inside a text the server wrote.
_AGENT_TOKEN = re.compile(
    r"\bagent:([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b"
)


def runtime_agent(runtime: str) -> UUID | None:
    """The agent a runtime string names: "agent:<id>" (a job's, an event's)
    or "<id>" (a task's queue, a run's placement); None for the cloud, for
    nothing yet, or for anything else."""
    if not runtime or runtime == CLOUD:
        return None
    text = runtime.removeprefix(AGENT_PREFIX)
    try:
        return UUID(text)
    except ValueError:
        return None


def named_agents(*texts: str) -> set[UUID]:
    """The agents some runtime strings and texts name."""
    found: set[UUID] = set()
    for text in texts:
        agent = runtime_agent(text)
        if agent is not None:
            found.add(agent)
        elif AGENT_PREFIX in text:
            found.update(UUID(m) for m in _AGENT_TOKEN.findall(text))
    return found


def short_id(agent_id: UUID) -> str:
    return str(agent_id)[:SHORT_ID]


@dataclass(frozen=True)
class RuntimeNames:
    """The agents of one workspace that an answer names, by id."""

    agents: Mapping[UUID, AgentName] = field(default_factory=dict)

    @classmethod
    def of(cls, agents: Iterable[Agent]) -> RuntimeNames:
        """From every agent of a workspace (the monitor holds them all)."""
        every = list(agents)
        seen = Counter(a.name.lower() for a in every)
        return cls({a.id: AgentName(a.id, a.name, seen[a.name.lower()] > 1) for a in every})

    def agent_label(self, agent_id: UUID) -> str:
        found = self.agents.get(agent_id)
        if found is None:
            return f"agent {short_id(agent_id)} (deleted)"
        if found.shared:
            return f"agent {found.name} ({short_id(agent_id)})"
        return f"agent {found.name}"

    def label(self, runtime: str) -> str:
        """ "cloud", an agent's label, or "" for a stage with no runtime yet."""
        agent = runtime_agent(runtime)
        if agent is None:
            return CLOUD if runtime == CLOUD else runtime
        return self.agent_label(agent)

    def agent_name(self, runtime: str) -> str:
        """The name of the runtime's agent; "" for the cloud or a lost agent."""
        agent = runtime_agent(runtime)
        found = self.agents.get(agent) if agent else None
        return found.name if found else ""

    def text(self, message: str) -> str:
        """A text the server wrote, with each "agent:<id>" as its label."""
        if AGENT_PREFIX not in message:
            return message
        return _AGENT_TOKEN.sub(lambda m: self.agent_label(UUID(m.group(1))), message)

    def job(self, job: Job) -> Job:
        """The job with its runtimes named and its error message readable."""
        return replace(
            job,
            error_message=self.text(job.error_message),
            extract_agent_name=self.agent_name(job.extract_runtime),
            load_agent_name=self.agent_name(job.load_runtime),
            extract_runtime_label=self.label(job.extract_runtime),
            load_runtime_label=self.label(job.load_runtime),
        )

    def event(self, event: JobEvent) -> JobEvent:
        return replace(event, message=self.text(event.message))


NO_AGENTS = RuntimeNames()


async def names_for(db: Executor, workspace_id: UUID, agents: set[UUID]) -> RuntimeNames:
    """The agents named in an answer, in one statement; none: no statement."""
    if not agents:
        return NO_AGENTS
    found = await tenancy.agent_names(db, workspace_id, sorted(agents))
    return RuntimeNames({a.id: a for a in found})


def job_agents(jobs: Iterable[Job]) -> set[UUID]:
    return set().union(
        *(named_agents(j.extract_runtime, j.load_runtime, j.error_message) for j in jobs)
    )


async def named_jobs(db: Executor, workspace_id: UUID, jobs: list[Job]) -> list[Job]:
    names = await names_for(db, workspace_id, job_agents(jobs))
    return [names.job(j) for j in jobs]


async def named_events(db: Executor, workspace_id: UUID, events: list[JobEvent]) -> list[JobEvent]:
    names = await names_for(db, workspace_id, named_agents(*(e.message for e in events)))
    return [names.event(e) for e in events]
