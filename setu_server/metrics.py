"""Prometheus metrics of one server process (docs/operations.md, "Metrics").

Every metric family is defined here, on a registry that belongs to one
server (`Services.metrics`), so several servers in one process (tests) never
share figures. Call sites only call a method of `Metrics`. Three kinds of
figures:

- counted where they happen: gRPC calls, job transitions (in the process
  that committed them, so a run is counted once however many replicas
  watch it), lease expiries, notifications;
- read at scrape time from live objects, without I/O: watches in the hub,
  LISTEN sessions, parked long-polls;
- read from the database by a periodic refresh (maintenance/gauges.py):
  tasks pending and leased, agents and when they were last seen.

`exposition()` renders a registry in the text format `/metrics` serves.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from setu_client.clock import Clock, SystemClock
from setu_server.models import CLOUD, Agent, Job, JobKind, Task, TaskState

# The default registry of the process, for tools that want one; a server
# renders its own (`exposition(services.metrics.registry)`).
REGISTRY = CollectorRegistry(auto_describe=True)

# Calls whose latency is the wait, not the work: timed apart, so they do not
# drown the latency of short calls.
LONG_POLLS = frozenset({"WaitJob", "WatchJob", "LeaseTask"})

# Short calls: a few milliseconds to a few seconds.
CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Long-polls end at their cap (30 s LeaseTask, 60 s WaitJob) or at the news;
# a WatchJob stream lasts as long as its run.
LONG_POLL_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 29.0, 31.0, 59.0, 61.0, 300.0, 1800.0, 7200.0)
# Runs take seconds to hours.
RUN_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
# From eligible to leased: at once while runtimes wait, longer under backlog.
PICKUP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


def exposition(registry: CollectorRegistry = REGISTRY) -> tuple[bytes, str]:
    """The registry's current figures and their content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


def placement_of(runtime: str) -> str:
    """A task's runtime as a label: "cloud" or "agent" (agent ids would make
    a series per agent in every histogram)."""
    return CLOUD if runtime == CLOUD else "agent"


def flow_of(job: Job) -> str:
    """A run's flow as a label: cloud_to_cloud, agent_to_cloud, ..."""
    if job.params is None:
        return "unknown"
    where = job.params.placement
    ends = ("agent" if agent else "cloud" for agent in (where.extract_agent, where.load_agent))
    return "_to_".join(ends)


class HubView(Protocol):
    @property
    def watched(self) -> int: ...


class ListenerView(Protocol):
    sessions: int
    connected: asyncio.Event

    @property
    def healthy(self) -> bool: ...


@dataclass(frozen=True)
class TaskCount:
    """One row of the task queue's census."""

    runtime: str
    kind: str
    state: str
    tasks: int


class Metrics:
    """The metric families of one server, on a registry of their own."""

    def __init__(self, clock: Clock | None = None, *, process: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._clock = clock or SystemClock()
        if process:
            # The standard collectors, on this registry rather than the global one.
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self._define_calls()
        self._define_jobs()
        self._define_tasks()
        self._define_long_polls()
        # Filled by the refresh and by check-ins; read at scrape time.
        self._tasks: list[TaskCount] = []
        self._agents: dict[UUID, Agent] = {}
        self._online: Callable[[Agent], bool] | None = None
        self._live: _LiveCollector | None = None
        self.registry.register(_CensusCollector(self))

    # -- definitions

    def _define_calls(self) -> None:
        r = self.registry
        self.grpc_handled = Counter(
            "setu_grpc_server_handled",
            "gRPC calls answered, by method and status code.",
            ["grpc_service", "grpc_method", "grpc_code"],
            registry=r,
        )
        self.grpc_seconds = Histogram(
            "setu_grpc_server_handling_seconds",
            "Time to answer a gRPC call, long-polls (WaitJob, WatchJob, LeaseTask) excepted.",
            ["grpc_service", "grpc_method"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.long_poll_seconds = Histogram(
            "setu_grpc_server_long_poll_seconds",
            "How long a long-poll (WaitJob, WatchJob, LeaseTask) stayed open: mostly its wait.",
            ["grpc_service", "grpc_method"],
            buckets=LONG_POLL_BUCKETS,
            registry=r,
        )
        self.parked = Gauge(
            "setu_grpc_server_parked_calls",
            "Long-poll calls (WaitJob, WatchJob, LeaseTask) open right now.",
            ["grpc_service", "grpc_method"],
            registry=r,
        )

    def _define_jobs(self) -> None:
        r = self.registry
        self.job_transitions = Counter(
            "setu_job_transitions",
            "Job state transitions committed by this server, by job kind and the state entered.",
            ["kind", "state"],
            registry=r,
        )
        self.run_seconds = Histogram(
            "setu_run_duration_seconds",
            "Time from a run's start to its end, by flow and the state it ended in.",
            ["flow", "state"],
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.rows_extracted = Counter(
            "setu_run_rows_extracted",
            "Rows read from sources by runs that ended, by pipeline id.",
            ["pipeline"],
            registry=r,
        )
        self.rows_loaded = Counter(
            "setu_run_rows_loaded",
            "Rows written to destinations by runs that ended, by pipeline id.",
            ["pipeline"],
            registry=r,
        )

    def _define_tasks(self) -> None:
        r = self.registry
        self.pickup_seconds = Histogram(
            "setu_task_pickup_seconds",
            "Time from a task becoming eligible to its lease, by runtime (cloud, agent) and kind.",
            ["runtime", "kind"],
            buckets=PICKUP_BUCKETS,
            registry=r,
        )
        self.lease_expiries = Counter(
            "setu_task_lease_expiries",
            "Leases that ran out without a heartbeat, found by the reaper.",
            ["runtime", "kind"],
            registry=r,
        )
        self.requeues = Counter(
            "setu_task_requeues",
            "Tasks the reaper put back in their queue after their lease expired.",
            ["runtime", "kind"],
            registry=r,
        )
        self.exhausted = Counter(
            "setu_task_attempts_exhausted",
            "Tasks failed for good with their attempts spent (lease expiries or retryable errors).",
            ["runtime", "kind"],
            registry=r,
        )
        self.released = Counter(
            "setu_tasks_released",
            "Tasks handed back without spending an attempt (a runtime draining, an outage).",
            ["runtime", "kind", "reason"],
            registry=r,
        )

    def _define_long_polls(self) -> None:
        r = self.registry
        self.notifications = Counter(
            "setu_listen_notifications_received",
            "PostgreSQL notifications received on the LISTEN connection, by channel.",
            ["channel"],
            registry=r,
        )
        self.rechecks = Counter(
            "setu_watch_rechecks",
            "Passes of the watch hub's periodic re-read of every watched job.",
            registry=r,
        )
        self.long_poll_cuts = Counter(
            "setu_long_poll_cuts",
            "Long-polls cut before they answered (cancelled by the client, or ended by a "
            "proxy or load balancer in between), by method.",
            ["method"],
            registry=r,
        )

    # -- gRPC (rpc/interceptor.py)

    def handled(self, method: str, code: str, seconds: float) -> None:
        """One answered call; `method` is gRPC's "/package.Service/Method"."""
        service, name = _split(method)
        self.grpc_handled.labels(service, name, code).inc()
        timing = self.long_poll_seconds if name in LONG_POLLS else self.grpc_seconds
        timing.labels(service, name).observe(seconds)

    def method(self, method: str) -> MethodCounts:
        """`handled` for one method, its labels resolved once (the interceptor
        holds one per method: a call then costs two increments, no lookup)."""
        return MethodCounts(self, method)

    def long_poll_cut(self, method: str) -> bool:
        """A call cancelled before it answered; counted (and True) when it
        was a long-poll, whose cuts say something is in between."""
        name = _split(method)[1]
        if name not in LONG_POLLS:
            return False
        self.long_poll_cuts.labels(name).inc()
        return True

    def parked_gauge(self, method: str) -> Gauge | None:
        """The parked-calls gauge of a long-poll method; None for other calls
        (the interceptor looks it up once per method, not per call)."""
        service, name = _split(method)
        return self.parked.labels(service, name) if name in LONG_POLLS else None

    @contextlib.contextmanager
    def parking(self, method: str) -> Iterator[None]:
        """Counts a long-poll as parked while it is open; other calls pass."""
        service, name = _split(method)
        if name not in LONG_POLLS:
            yield
            return
        gauge = self.parked.labels(service, name)
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    # -- jobs (service/lifecycle.py)

    def job_moved(self, job: Job) -> None:
        """A committed transition; `job` is the snapshot it left behind."""
        self.job_transitions.labels(job.kind.value, job.state.value).inc()
        if job.kind is not JobKind.RUN or not job.state.terminal:
            return
        if job.started_at is not None and job.finished_at is not None:
            seconds = (job.finished_at - job.started_at).total_seconds()
            self.run_seconds.labels(flow_of(job), job.state.value).observe(max(0.0, seconds))
        pipeline = str(job.pipeline_id) if job.pipeline_id else ""
        self.rows_extracted.labels(pipeline).inc(max(0, job.rows_extracted))
        self.rows_loaded.labels(pipeline).inc(max(0, job.rows_loaded))

    # -- tasks (service/tasks.py, maintenance/reaper.py)

    def task_leased(self, task: Task) -> None:
        """Pickup latency: the lease (the row's update) since it became eligible."""
        eligible = max(task.run_after, task.created_at)
        seconds = max(0.0, (task.updated_at - eligible).total_seconds())
        self.pickup_seconds.labels(placement_of(task.runtime), task.kind.value).observe(seconds)

    def lease_expired(self, task: Task) -> None:
        """A reaped task: requeued, or failed with its attempts spent."""
        labels = (placement_of(task.runtime), task.kind.value)
        self.lease_expiries.labels(*labels).inc()
        if task.state is TaskState.PENDING:
            self.requeues.labels(*labels).inc()
        else:
            self.exhausted.labels(*labels).inc()

    def task_failed(self, task: Task, retryable: bool) -> None:
        """A reported failure; counted when it would have retried but for its attempts."""
        if task.state is TaskState.FAILED and retryable and task.attempt >= task.max_attempts:
            self.exhausted.labels(placement_of(task.runtime), task.kind.value).inc()

    def task_released(self, task: Task, outage: bool) -> None:
        """A hand-back that spent no attempt (ReleaseTask)."""
        reason = "outage" if outage else "drain"
        self.released.labels(placement_of(task.runtime), task.kind.value, reason).inc()

    def tasks_counted(self, census: Iterable[TaskCount]) -> None:
        """The queue's pending and leased tasks, from the periodic refresh."""
        self._tasks = list(census)

    # -- agents (service/agents.py, the refresh)

    def agents_listed(self, agents: Iterable[Agent]) -> None:
        """Every active agent, from the periodic refresh. A check-in seen here
        since the query began keeps its newer time."""
        fresh = {agent.id: agent for agent in agents if agent.active}
        for agent_id, agent in fresh.items():
            known = self._agents.get(agent_id)
            if known is not None and _later(known.last_seen_at, agent.last_seen_at):
                fresh[agent_id] = known
        self._agents = fresh

    def judge_online(self, online: Callable[[Agent], bool]) -> None:
        """The presence service's rule for "online" (service/agents.py)."""
        self._online = online

    def agent_seen(self, agent: Agent) -> None:
        """A check-in through this server."""
        if agent.active:
            self._agents[agent.id] = agent

    # -- long-polls (server.py wires these)

    def watch_live(self, hub: HubView, listener: ListenerView) -> None:
        """Read the hub and the LISTEN connection at every scrape."""
        if self._live is None:
            self._live = _LiveCollector(hub, listener)
            self.registry.register(self._live)

    def counting(self, channel: str, handler: Callable[[str], None]) -> Callable[[str], None]:
        """`handler` for `channel`'s notifications, counting each one."""
        received = self.notifications.labels(channel)

        def handle(payload: str) -> None:
            received.inc()
            handler(payload)

        return handle

    def rechecked(self) -> None:
        self.rechecks.inc()

    # -- read at scrape time

    def census(self) -> Iterator[Metric]:
        tasks = GaugeMetricFamily(
            "setu_tasks",
            "Tasks pending and leased, by runtime (cloud or the agent's id), kind and state "
            "(refreshed every few seconds).",
            labels=["runtime", "kind", "state"],
        )
        for row in self._tasks:
            tasks.add_metric([row.runtime, row.kind, row.state], row.tasks)
        yield tasks
        now = self._clock.now()
        agents = list(self._agents.values())
        online = self._online or (lambda agent: agent.online(now))
        yield GaugeMetricFamily(
            "setu_agents_online",
            "Agents online: active, not signed off, and parked in LeaseTask or seen lately.",
            value=sum(1 for agent in agents if online(agent)),
        )
        age = GaugeMetricFamily(
            "setu_agent_last_seen_age_seconds",
            "Seconds since each active agent last checked in (absent: never).",
            labels=["agent", "name"],
        )
        seen = GaugeMetricFamily(
            "setu_agent_last_seen_timestamp_seconds",
            "When each active agent last checked in, as a Unix time.",
            labels=["agent", "name"],
        )
        for agent in agents:
            if agent.last_seen_at is not None:
                labels = [str(agent.id), agent.name]
                age.add_metric(labels, max(0.0, (now - agent.last_seen_at).total_seconds()))
                seen.add_metric(labels, agent.last_seen_at.timestamp())
        yield age
        yield seen


class MethodCounts:
    """One method's answered-calls counter (a child per status code, made on
    its first use) and its timing histogram's child."""

    __slots__ = ("_by_code", "_handled", "_name", "_service", "_timing")

    def __init__(self, metrics: Metrics, method: str) -> None:
        self._service, self._name = _split(method)
        self._handled = metrics.grpc_handled
        self._by_code: dict[str, Any] = {}
        timing = metrics.long_poll_seconds if self._name in LONG_POLLS else metrics.grpc_seconds
        self._timing = timing.labels(self._service, self._name)

    def handled(self, code: str, seconds: float) -> None:
        counter = self._by_code.get(code)
        if counter is None:
            counter = self._by_code[code] = self._handled.labels(self._service, self._name, code)
        counter.inc()
        self._timing.observe(seconds)


def _split(method: str) -> tuple[str, str]:
    service, _, name = method.lstrip("/").rpartition("/")
    return service, name


def _later(a: datetime | None, b: datetime | None) -> bool:
    return a is not None and (b is None or a > b)


class _CensusCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics.census()


class _LiveCollector(Collector):
    def __init__(self, hub: HubView, listener: ListenerView) -> None:
        self._hub = hub
        self._listener = listener

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "setu_watch_hub_watches",
            "Jobs somebody waits on or watches through this server.",
            value=self._hub.watched,
        )
        yield CounterMetricFamily(
            "setu_listen_reconnects",
            "Times the LISTEN connection was lost and opened again.",
            value=max(0, self._listener.sessions - 1),
        )
        yield GaugeMetricFamily(
            "setu_listen_connected",
            "1 while the LISTEN connection is open (whether notifications arrive on it: "
            "setu_listen_healthy).",
            value=1 if self._listener.connected.is_set() else 0,
        )
        yield GaugeMetricFamily(
            "setu_listen_healthy",
            "1 while notifications arrive on the LISTEN connection (a probe sent through "
            "the pool comes back); 0 while waits and leases fall back to short re-checks.",
            value=1 if self._listener.healthy else 0,
        )
