"""The gauges refresh: what the metrics know of the database (the task
queue's census, the agents) is re-read every few seconds, so a scrape never
waits on a query. Every replica reads the same figures: aggregate them with
max(), not sum()."""

from __future__ import annotations

from dataclasses import dataclass

from setu_server.config import GaugeSettings
from setu_server.maintenance.periodic import PeriodicService
from setu_server.metrics import Metrics, TaskCount
from setu_server.models import Agent
from setu_server.store import gauges, tenancy
from setu_server.store.db import Database


@dataclass(frozen=True)
class GaugeReading:
    tasks: list[TaskCount]
    agents: list[Agent]


class GaugeRefresh(PeriodicService[GaugeReading]):
    name = "gauges"

    def __init__(
        self, db: Database, metrics: Metrics, settings: GaugeSettings | None = None
    ) -> None:
        self.settings = settings or GaugeSettings()
        super().__init__(self.settings.interval_seconds)
        self._db = db
        self._metrics = metrics

    async def run_once(self) -> GaugeReading:
        reading = GaugeReading(
            tasks=await gauges.count_open_tasks(self._db),
            agents=await tenancy.list_active_agents(self._db),
        )
        self._metrics.tasks_counted(reading.tasks)
        self._metrics.agents_listed(reading.agents)
        return reading
