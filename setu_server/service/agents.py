"""Agent presence: which agents are online, and what they say about themselves.

An agent is online when it is active, has not signed off (a graceful stop
says so at once), and either has a LeaseTask parked on this server or was
seen (any call) within the presence window. The window is derived from the
lease settings, not fixed: a live agent calls at least once per lease
long-poll cap (an idle slot re-parks its LeaseTask) and once per third of
the lease TTL (a busy slot heartbeats), so the window is the longer of the
two plus a grace for the throttled write of `last_seen_at`, latency and a
reconnect (docs/jobs-and-tasks.md#agent-presence).

Across replicas `last_seen_at` is the shared truth: a LeaseTask refreshes it
when it parks and when it ends, so a call parked on replica A keeps the agent
online for replica B, whose own count of parked calls does not see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol
from uuid import UUID

from setu_client.clock import Clock
from setu_client.errors import AgentOffline
from setu_server.hooks import Hooks
from setu_server.models import DEFAULT_PRESENCE_WINDOW, Agent, AgentWork, EventLevel, JobKind
from setu_server.service import paging
from setu_server.store import agent_waits, jobs, tenancy
from setu_server.store.agent_waits import WaitingJob
from setu_server.store.db import Database, Executor, transaction

log = logging.getLogger("setu.agents")

# Beyond the longest a live agent goes between calls: the 5 s throttle of
# last_seen_at writes, the call's own latency, and a reconnect.
PRESENCE_GRACE = timedelta(seconds=15)
# This process writes an agent's last_seen_at at most this often (loop clock).
TOUCH_EVERY_SECONDS = 5.0
DEFAULT_PAGE_SIZE = 100
# Sorts after every id: a page token without one resumes after its name.
LAST_ID = UUID(int=(1 << 128) - 1)


def presence_window(lease_wait_cap_seconds: float, lease_ttl_seconds: float) -> timedelta:
    """How long an agent may go unseen and still be online, for these lease settings."""
    longest_quiet = max(lease_wait_cap_seconds, lease_ttl_seconds / 3)
    return timedelta(seconds=longest_quiet) + PRESENCE_GRACE


@dataclass(frozen=True)
class AgentStatus:
    """An agent as its workspace's clients see it."""

    agent: Agent
    online: bool
    work: AgentWork


class SeenAgents(Protocol):
    """Who hears of a check-in at once (the metrics)."""

    def agent_seen(self, agent: Agent) -> None: ...


class AgentPresence:
    def __init__(
        self,
        pool: Database,
        clock: Clock,
        metrics: SeenAgents | None = None,
        *,
        window: timedelta = DEFAULT_PRESENCE_WINDOW,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._metrics = metrics
        self.window = window
        # LeaseTask calls in flight here, per agent.
        self._parked: Counter[UUID] = Counter()
        # When (loop clock) this process last wrote each agent's last_seen_at.
        self._touched: dict[UUID, float] = {}
        # `parked`: a LeaseTask of the agent began here; `left`: one ended.
        self.hooks: Hooks[UUID] = Hooks("parked", "left")

    # -- what agents say

    async def check_in(
        self, agent_id: UUID, version: str, capabilities: list[str], hostname: str
    ) -> Agent:
        """Records the agent's version and capabilities; ends a sign-off."""
        agent = await tenancy.check_in_agent(
            self._pool,
            agent_id,
            version,
            sorted(set(capabilities)),
            hostname,
            self._clock.sql_now(),
        )
        if self._metrics is not None:
            self._metrics.agent_seen(agent)
        return agent

    async def sign_off(self, agent_id: UUID, reason: str) -> None:
        """A graceful stop: offline at once, on every replica, until it checks
        in. The jobs it leaves waiting say so on their timelines, once per
        sign-off (a repeated SignOff adds nothing)."""
        now = self._clock.sql_now()
        warned = 0
        async with transaction(self._pool) as conn:
            was = await agent_waits.lock_agent_for_sign_off(conn, agent_id)
            await tenancy.sign_off_agent(conn, agent_id, now)
            if was is not None and was.signed_off_at is None:
                warned = await _warn_waiting(conn, agent_id, was.name, now)
        log.info(
            "agent signed off",
            extra={"agent_id": str(agent_id), "reason": reason, "jobs_waiting": warned},
        )

    async def offline_note(self, db: Executor, agent_id: UUID, what: str) -> str | None:
        """For a job's timeline when work is queued on an agent that is not
        online (`what` waits: "load", say); None when it is online."""
        agent = await tenancy.get_agent(db, agent_id)
        if agent is not None and self.online(agent):
            return None
        name, seen = _who_and_when(agent, agent_id)
        return (
            f"{name} is offline ({seen}): the {what} waits for it to come back "
            f"(start it with `setu-agent --server <address> --token <agent token>`)"
        )

    @contextlib.asynccontextmanager
    async def leasing(self, agent_id: UUID) -> AsyncIterator[None]:
        """Around one LeaseTask call: the agent counts as online while it is
        parked here, and its last_seen_at is refreshed as it parks and ends,
        so other replicas see it online too."""
        self._parked[agent_id] += 1
        try:
            await self._touch(agent_id)
            await self.hooks.parked(agent_id)
            yield
        finally:
            self._parked[agent_id] -= 1
            if self._parked[agent_id] <= 0:
                del self._parked[agent_id]
            # Best effort, and even when the call was cancelled (the agent
            # hung up): it was there until now.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._touch(agent_id))
            await self.hooks.left(agent_id)

    def parked_calls(self, agent_id: UUID) -> int:
        """LeaseTask calls of this agent in flight on this server."""
        return self._parked.get(agent_id, 0)

    async def _touch(self, agent_id: UUID) -> None:
        loop_now = asyncio.get_running_loop().time()
        if self._touched.get(agent_id, -math.inf) > loop_now - TOUCH_EVERY_SECONDS:
            return
        if len(self._touched) > 10_000:
            self._touched.clear()
        self._touched[agent_id] = loop_now
        await tenancy.touch_agent(self._pool, agent_id, self._clock.sql_now())

    # -- who is online

    def online(self, agent: Agent) -> bool:
        return agent.online(self._clock.now(), self.window, parked=self.parked_calls(agent.id) > 0)

    async def require_online(self, db: Executor, agent_id: UUID) -> Agent:
        """The agent, or AgentOffline saying which agent and how to bring it back."""
        agent = await tenancy.get_agent(db, agent_id)
        if agent is not None and self.online(agent):
            return agent
        raise AgentOffline(offline_message(agent, agent_id))

    async def list_agents(
        self, workspace_id: UUID, agent_id: UUID | None, page_size: int, page_token: str
    ) -> tuple[list[AgentStatus], str]:
        """The workspace's agents by name, a page at a time, with what each does now."""
        query = repr(("agents", workspace_id, agent_id))
        position = paging.decode(page_token, query)
        after = None
        if position:
            # A token from before ids were in it: after every agent of that name.
            after = (str(position["name"]), UUID(position.get("id", str(LAST_ID))))
        size = page_size or DEFAULT_PAGE_SIZE
        found = await tenancy.list_workspace_agents(
            self._pool, workspace_id, agent_id, after, size + 1
        )
        page, more = found[:size], len(found) > size
        work = await tenancy.agents_work(self._pool, workspace_id, [a.id for a in page])
        token = ""
        if more:
            token = paging.encode({"name": page[-1].name, "id": str(page[-1].id)}, query)
        return [AgentStatus(a, self.online(a), work[a.id]) for a in page], token


async def _warn_waiting(db: Executor, agent_id: UUID, name: str, now: datetime | None) -> int:
    """A warning on the timeline of each job the sign-off leaves waiting."""
    waiting = await agent_waits.jobs_waiting_on_agent(db, agent_id)
    for job in waiting:
        await jobs.insert_job_event(
            db, job.job_id, left_waiting(name, job), now=now, level=EventLevel.WARNING
        )
    return len(waiting)


def left_waiting(name: str, job: WaitingJob) -> str:
    """The timeline line of a job its agent's sign-off leaves waiting."""
    what = "run" if job.kind is JobKind.RUN else job.kind.value
    if job.running:
        return (
            f"Agent {name} signed off while running this {what}'s task: it finishes "
            f"within the agent's shutdown grace, or waits for the agent to come back"
        )
    return f"Agent {name} signed off; the {what} waits for it to come back"


def _who_and_when(agent: Agent | None, agent_id: UUID) -> tuple[str, str]:
    name = f"agent {agent.name} ({agent_id})" if agent else f"agent {agent_id}"
    if agent is not None and not agent.active:
        return name, "deactivated"
    if agent is not None and agent.signed_off_at is not None:
        seen = f"stopped at {agent.signed_off_at:%Y-%m-%d %H:%M:%S} UTC"
    elif agent is not None and agent.last_seen_at is not None:
        seen = f"last seen {agent.last_seen_at:%Y-%m-%d %H:%M:%S} UTC"
    else:
        seen = "never seen"
    return name, seen


def offline_message(agent: Agent | None, agent_id: UUID) -> str:
    name, seen = _who_and_when(agent, agent_id)
    if agent is not None and not agent.active:
        return f"{name} is deactivated; register a new agent and place the connection on it"
    return (
        f"{name} is offline ({seen}): start it with `setu-agent --server <address> "
        f"--token <agent token>` and try again"
    )
