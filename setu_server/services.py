"""The parts of one server process: its domain services, the loops that run
beside them, and the background tasks they share. Built by
setu_server.server.build_services; read by the gRPC servicers and the run
monitor (web/)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from setu_engine.staged.blob import BlobStore
from setu_server.maintenance.gauges import GaugeRefresh
from setu_server.maintenance.janitor import Janitor
from setu_server.maintenance.listen_fallback import ListenFallback
from setu_server.maintenance.periodic import PeriodicService
from setu_server.maintenance.reaper import Reaper
from setu_server.maintenance.scheduler import Scheduler
from setu_server.metrics import Metrics
from setu_server.service.admin import AdminService
from setu_server.service.agents import AgentPresence
from setu_server.service.auth import Authenticator
from setu_server.service.cloud_runs import CloudRuns
from setu_server.service.connection_ops import ConnectionOps
from setu_server.service.connections import ConnectionService
from setu_server.service.jobs import JobService
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.pipelines import PipelineService
from setu_server.service.runs import RunService
from setu_server.service.signals import TaskSignals
from setu_server.service.tasks import TaskService
from setu_server.service.watch import WatchHub
from setu_server.store.db import Database
from setu_server.store.listener import Listener
from setu_server.worker.supervisor import WorkerSupervisor


@dataclass
class Services:
    """The domain services of one server process, and its background work."""

    pool: Database
    hub: WatchHub
    signals: TaskSignals
    listener: Listener
    lifecycle: JobLifecycle
    jobs: JobService
    tasks: TaskService
    admin: AdminService
    presence: AgentPresence
    reaper: Reaper
    scheduler: Scheduler
    janitor: Janitor
    cloud_runs: CloudRuns
    # Present once the server listens and starts its own cloud workers.
    workers: WorkerSupervisor | None
    worker_token: str
    background: list[asyncio.Task[None]]
    auth: Authenticator
    connections: ConnectionService
    pipelines: PipelineService
    runs: RunService
    blob: BlobStore
    connection_ops: ConnectionOps
    # Prometheus: this server's figures (its own registry), and their refresh.
    metrics: Metrics
    gauges: GaugeRefresh
    # Short re-checks while the LISTEN session does not deliver.
    fallback: ListenFallback

    @property
    def maintenance(self) -> tuple[PeriodicService[Any], ...]:
        """The background loops: started together by `start()`, stopped
        together when the server stops."""
        return (self.reaper, self.scheduler, self.janitor, self.gauges)

    async def start(self) -> None:
        """What runs in the background once the parts are built: the LISTEN
        session, the watch hub and the maintenance loops (the listen fallback
        starts itself when the LISTEN session stops delivering)."""
        await self.listener.start()
        self.hub.start()
        for service in self.maintenance:
            service.start()
