"""A builder for integration tests: the server's domain services on the
test's own database, wired as setu_server.server wires them, without gRPC,
the LISTEN connection or the cloud worker. A test builds what it needs and
moves the fake clock itself (SQL takes "now" from it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from setu_client.clock import FakeClock
from setu_engine.staged.blob import BlobSettings
from setu_server.config import LeasePolicy
from setu_server.service.jobs import JobService
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.outcomes import TaskOutcomes
from setu_server.service.runs import RunService
from setu_server.service.signals import TaskSignals
from setu_server.service.tasks import TaskService
from setu_server.service.watch import WatchHub
from setu_server.store import jobs
from setu_server.store.db import Database

START = datetime(2030, 1, 1, tzinfo=UTC)


@dataclass
class Domain:
    db: Database
    clock: FakeClock
    hub: WatchHub
    lifecycle: JobLifecycle
    signals: TaskSignals
    runs: RunService
    outcomes: TaskOutcomes
    tasks: TaskService
    jobs: JobService


def build_domain(
    db: Database,
    clock: FakeClock | None = None,
    *,
    policy: LeasePolicy | None = None,
    blob_root: Path | None = None,
) -> Domain:
    clock = clock or FakeClock(START)
    hub = WatchHub(lambda ids: jobs.get_jobs(db, ids))
    lifecycle = JobLifecycle(db, hub, clock)
    signals = TaskSignals()
    runs = RunService(
        db, clock, lifecycle, BlobSettings("local", str(blob_root or Path("/nonexistent")))
    )
    outcomes = TaskOutcomes(lifecycle, clock.sql_now, runs)
    tasks = TaskService(db, clock, lifecycle, signals, policy or LeasePolicy(), outcomes)
    job_service = JobService(db, clock, hub, lifecycle, dispatcher=runs)
    return Domain(db, clock, hub, lifecycle, signals, runs, outcomes, tasks, job_service)
