"""Assemble and run setu-server: database, services, gRPC server, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import secrets
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from setu_client._proto.setu.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    agents_pb2,
    agents_pb2_grpc,
    cloud_pb2,
    cloud_pb2_grpc,
    connections_pb2,
    connections_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
    pipelines_pb2,
    pipelines_pb2_grpc,
)
from setu_client.clock import Clock, SystemClock
from setu_engine.staged.blob import BlobSettings, open_blob
from setu_engine.staged.s3 import S3Settings
from setu_engine.support import testpoints
from setu_server.config import (
    Settings,
)
from setu_server.hooks import Hooks
from setu_server.maintenance.gauges import GaugeRefresh
from setu_server.maintenance.janitor import Janitor
from setu_server.maintenance.listen_fallback import ListenFallback
from setu_server.maintenance.reaper import Reaper
from setu_server.maintenance.scheduler import Scheduler
from setu_server.metrics import Metrics
from setu_server.rpc import reflection
from setu_server.rpc.admin import AdminServicer
from setu_server.rpc.agents import AgentServicer
from setu_server.rpc.cloud import CloudRunServicer
from setu_server.rpc.connections import ConnectionServicer
from setu_server.rpc.directory import AgentDirectoryServicer
from setu_server.rpc.interceptor import CallInterceptor
from setu_server.rpc.jobs import JobServicer
from setu_server.rpc.pipelines import PipelineServicer
from setu_server.service import paging
from setu_server.service.admin import AdminService
from setu_server.service.agents import AgentPresence, presence_window
from setu_server.service.auth import AUTH_CHANNEL, Authenticator
from setu_server.service.cloud_runs import CloudRuns
from setu_server.service.connection_ops import ConnectionOps
from setu_server.service.connections import ConnectionService
from setu_server.service.jobs import JobService
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.outcomes import TaskOutcomes
from setu_server.service.pipelines import PipelineService
from setu_server.service.runbook import RunBook
from setu_server.service.runs import RunService
from setu_server.service.secrets import digest
from setu_server.service.signals import TaskSignals
from setu_server.service.tasks import TaskService
from setu_server.service.watch import WatchHub
from setu_server.services import Services
from setu_server.store import databases, db, jobs
from setu_server.store.db import Database
from setu_server.store.embedded import EmbeddedPostgres
from setu_server.store.listener import Listener, send_probe
from setu_server.store.migrate import migrate
from setu_server.store.pooler import Pooler, pooler_setting, resolve_pooler
from setu_server.web import HttpListener, serve_monitor
from setu_server.worker.endpoints import own_database
from setu_server.worker.environment import worker_settings
from setu_server.worker.supervisor import WorkerSupervisor

log = logging.getLogger("setu.server")

# The gRPC health service's name for the LISTEN session: SERVING while
# notifications arrive, NOT_SERVING while waits and leases fall back to
# re-checks (the server itself still serves: "" stays SERVING).
LISTEN_HEALTH = "setu.listen"

# What store/queries/*.sql notify: every job transition, and every task that
# becomes eligible to lease (payload: its runtime).
JOB_CHANNEL = "setu_job"
TASK_CHANNEL = "setu_task"

SERVICE_NAMES = (
    jobs_pb2.DESCRIPTOR.services_by_name["JobOrchestrationService"].full_name,
    connections_pb2.DESCRIPTOR.services_by_name["ConnectionService"].full_name,
    pipelines_pb2.DESCRIPTOR.services_by_name["PipelineService"].full_name,
    agents_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
    agents_pb2.DESCRIPTOR.services_by_name["AgentDirectoryService"].full_name,
    cloud_pb2.DESCRIPTOR.services_by_name["CloudRunService"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
)

# Long-polls park many calls on one connection, so no stream limit;
# clients ping to detect dead peers, so permit their pings.
GRPC_OPTIONS = (
    ("grpc.max_concurrent_streams", 2**31 - 1),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    # grpcio times a ping out at this (60 s by default), whatever the above says.
    ("grpc.http2.ping_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
    # One process per port unless --processes asks for several (reuse_port()):
    # a second server started on a taken port fails rather than shares it.
    ("grpc.so_reuseport", 0),
    # Calls wait here until the server loop picks them up. gRPC's default of
    # 1000 waiting calls cancels the rest of a burst, such as every client
    # re-issuing its WaitJob after a restart; let bursts queue instead.
    ("grpc.server.max_pending_requests", 50_000),
    ("grpc.server.max_pending_requests_hard_limit", 100_000),
    # ...and let them wait long enough to be picked up (default 30 s).
    ("grpc.server_max_unrequested_time_in_server", 300),
)


# A test holds a WaitJob of a real server process here, subscribed and its
# job read, by SETU_TEST_PAUSE=wait-read=<folder> (setu_engine/support/testpoints.py).
WAIT_READ_POINT = "wait-read"


def reuse_port(options: tuple[tuple[str, object], ...]) -> tuple[tuple[str, object], ...]:
    """`options` for one of several processes sharing a port (--processes N)."""
    return (*((k, v) for k, v in options if k != "grpc.so_reuseport"), ("grpc.so_reuseport", 1))


@dataclass
class Running:
    """A started server: its port, its parts (for tests), and how to stop it."""

    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    settings: Settings
    services: Services
    # `draining`: stop() closed the long-polls and is about to stop the
    # workers (a test holds it there to call the closing server).
    hooks: Hooks[None] = field(default_factory=lambda: Hooks("draining"))
    # The run monitor and /metrics; None when SETU_HTTP_LISTEN is empty.
    http: HttpListener | None = None

    @property
    def http_url(self) -> str:
        """The monitor's bound URL (`http://127.0.0.1:8080`), or "" when off."""
        return self.http.url if self.http is not None else ""

    @property
    def pool(self) -> Database:
        return self.services.pool

    @property
    def hub(self) -> WatchHub:
        return self.services.hub

    @property
    def listener(self) -> Listener:
        return self.services.listener

    @property
    def jobs(self) -> JobService:
        return self.services.jobs

    @property
    def lifecycle(self) -> JobLifecycle:
        return self.services.lifecycle

    @property
    def tasks(self) -> TaskService:
        return self.services.tasks

    async def stop(self, grace: float | None = None) -> None:
        grace = self.settings.grace_seconds if grace is None else grace
        parts = self.services
        # Parked long-polls answer at once with what they have, and new ones
        # (WaitJob, WatchJob, LeaseTask) are refused UNAVAILABLE, so clients
        # back off to another replica rather than spin here; the cloud
        # workers finish or hand back their tasks (over gRPC, so the server
        # still serves); then the server refuses new calls and gives short
        # in-flight ones the grace.
        parts.signals.close()
        await parts.hub.close()
        if self.http is not None:
            await self.http.stop()
        await self.hooks.draining(None)
        await testpoints.reached(testpoints.SERVER_DRAINING)
        if parts.workers is not None:
            await parts.workers.stop(grace)
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        await asyncio.gather(*(service.stop() for service in parts.maintenance))
        for task in parts.background:
            task.cancel()
        await asyncio.gather(*parts.background, return_exceptions=True)
        # The listener first: a verdict it reached meanwhile would start the
        # fallback's loop again after its stop.
        await parts.listener.close()
        await parts.fallback.stop()
        await parts.blob.close()
        await parts.pool.close()


async def database_url(settings: Settings, stack: contextlib.AsyncExitStack) -> str:
    """The configured database, or an embedded server started for this process."""
    if settings.database_url:
        return settings.database_url
    embedded = EmbeddedPostgres(settings.embedded_pg_dir.resolve())
    url = await embedded.start()
    stack.push_async_callback(embedded.stop)
    return url


def blob_settings(settings: Settings) -> BlobSettings:
    """Where runs stage: a local folder by default; S3 for `s3://bucket`.
    Runtimes bring their own S3 credentials (the AWS environment variables
    or an instance role, as botocore finds them); the settings name none."""
    if settings.blob_url.startswith("s3://"):
        # Settings refused any other shape of URL when they were built.
        bucket = settings.blob_url[len("s3://") :].partition("/")[0]
        return BlobSettings("s3", bucket, settings.s3_endpoint_url, settings.s3_region)
    return BlobSettings("local", str(Path(settings.blob_root).resolve()))


async def _open_database(settings: Settings, url: str) -> tuple[Database, Pooler]:
    """The migrated database's pool, and the pooler in front of it."""
    pooler = await resolve_pooler(pooler_setting(settings.database_pooler), url)
    cache = pooler.keeps_sessions  # named prepared statements need a session
    conn = await db.connect(url, statement_cache=cache)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    pool = await db.create_pool(url, max_size=settings.db_pool_size, statement_cache=cache)
    return pool, pooler


def _notifications(
    settings: Settings,
    url: str,
    pool: Database,
    pooler: Pooler,
    metrics: Metrics,
    auth: Authenticator,
) -> tuple[WatchHub, TaskSignals, ListenFallback, Listener]:
    """What notifications wake (the watch hub, the task signals), the LISTEN
    session that delivers them, and the fallback for while it does not."""
    hub = WatchHub(
        lambda ids: jobs.get_jobs(pool, ids),
        changed=lambda ids, versions: jobs.changed_jobs(pool, ids, versions),
        recheck_interval=settings.watch_recheck_seconds,
        metrics=metrics,
    )
    signals = TaskSignals()

    async def after_reconnect() -> None:
        signals.wake_all()  # a task may have arrived while nobody listened
        auth.missed_announcements()  # ...and a revocation
        await hub.refresh_all()

    fallback = ListenFallback(hub, signals, settings.fallback)

    async def probe(channel: str, payload: str) -> None:
        await send_probe(pool, channel, payload)

    listener = Listener(
        settings.listen_database_url or url,
        {
            JOB_CHANNEL: metrics.counting(JOB_CHANNEL, hub.notified),
            TASK_CHANNEL: metrics.counting(TASK_CHANNEL, signals.notified),
            AUTH_CHANNEL: metrics.counting(AUTH_CHANNEL, auth.revoked_elsewhere),
        },
        after_reconnect,
        ping_interval=settings.listen_probe_seconds,
        probe=probe,
        on_health=fallback.listen_health,
        # LISTEN through the same transaction-mode pooler cannot hold a session.
        pooled=pooler is Pooler.TRANSACTION and not settings.listen_database_url,
    )
    metrics.watch_live(hub, listener)
    return hub, signals, fallback, listener


async def build_services(settings: Settings, url: str, clock: Clock) -> Services:
    """Connects (migrating first) and constructs this process's parts; none
    runs yet: `Services.start()` starts them."""
    pool, pooler = await _open_database(settings, url)
    admin_digest = digest(settings.admin_token) if settings.admin_token else None
    # The server's own workers get a fresh token when none is configured.
    worker_token = settings.worker_token or secrets.token_urlsafe(32)
    auth = Authenticator(
        pool,
        clock,
        admin_digest,
        settings.auth_cache_seconds,
        worker_token_digest=digest(worker_token),
        # Revocations reach every process and replica (AUTH_CHANNEL).
        announce=lambda payload: send_probe(pool, AUTH_CHANNEL, payload),
    )
    metrics = Metrics(clock)
    hub, signals, fallback, listener = _notifications(settings, url, pool, pooler, metrics, auth)
    lifecycle = JobLifecycle(pool, hub, clock, metrics)
    where = blob_settings(settings)
    blob = open_blob(where, S3Settings(where.endpoint_url, where.region or "us-east-1"))
    window = presence_window(settings.leasing.wait_cap_seconds, settings.leasing.ttl_seconds)
    presence = AgentPresence(pool, clock, metrics, window=window)
    metrics.judge_online(presence.online)
    runs_service = RunService(pool, clock, lifecycle, where, presence)
    outcomes = TaskOutcomes(lifecycle, clock.sql_now, runs_service)
    task_service = TaskService(pool, clock, lifecycle, signals, settings.leasing, outcomes, metrics)
    reaper = Reaper(
        pool,
        clock,
        lifecycle,
        task_service.outcomes,
        task_service.policy,
        settings.reaper,
        metrics,
    )
    scheduler = Scheduler(pool, clock, runs_service, settings.scheduler)
    janitor = Janitor(pool, clock, blob, settings.janitor)
    job_service = JobService(pool, clock, hub, lifecycle, dispatcher=runs_service)
    background: list[asyncio.Task[None]] = []
    services = Services(
        pool=pool,
        hub=hub,
        signals=signals,
        listener=listener,
        lifecycle=lifecycle,
        jobs=job_service,
        tasks=task_service,
        admin=AdminService(pool, clock, task_service, auth.forget),
        auth=auth,
        presence=presence,
        reaper=reaper,
        scheduler=scheduler,
        janitor=janitor,
        cloud_runs=CloudRuns(pool, clock, RunBook(pool, clock, lifecycle), where),
        workers=None,
        worker_token=worker_token,
        background=background,
        connections=ConnectionService(pool, clock),
        pipelines=PipelineService(pool, clock, lifecycle),
        runs=runs_service,
        blob=blob,
        connection_ops=ConnectionOps(pool, clock, job_service, presence),
        metrics=metrics,
        gauges=GaugeRefresh(pool, metrics, settings.gauges),
        fallback=fallback,
    )
    return services


async def start(
    settings: Settings, url: str, clock: Clock | None = None, process: int | None = None
) -> Running:
    """Migrate, then serve on settings.listen (port 0 picks a free one).
    `process`: this one's index among the N processes that share the port
    (setu_server/processes.py), which every answer names; None: alone."""
    clock = clock or SystemClock()
    paging.use_key(settings.page_token_key)
    parts = await build_services(settings, url, clock)
    await parts.start()
    if os.environ.get(testpoints.ENV, "").partition("=")[0] == WAIT_READ_POINT:
        parts.jobs.hooks.after_read = lambda _: testpoints.reached(WAIT_READ_POINT)
    # What the cloud workers must refuse: this server's own database.
    own = own_database(
        url, await databases.own_settings(parts.pool), also=[settings.listen_database_url]
    )
    server = grpc.aio.server(
        interceptors=[
            CallInterceptor(parts.auth, parts.metrics, parts.hub.closing, process=process)
        ],
        options=GRPC_OPTIONS if process is None else reuse_port(GRPC_OPTIONS),
    )
    admin_pb2_grpc.add_AdminServiceServicer_to_server(
        AdminServicer(parts.admin, parts.presence), server
    )
    agents_pb2_grpc.add_AgentDirectoryServiceServicer_to_server(
        AgentDirectoryServicer(parts.presence), server
    )
    agents_pb2_grpc.add_AgentServiceServicer_to_server(
        AgentServicer(parts.presence, parts.tasks, parts.runs, settings, own),
        server,
    )
    cloud_pb2_grpc.add_CloudRunServiceServicer_to_server(CloudRunServicer(parts.cloud_runs), server)
    jobs_pb2_grpc.add_JobOrchestrationServiceServicer_to_server(
        JobServicer(parts.jobs, parts.runs, settings),
        server,
    )
    connections_pb2_grpc.add_ConnectionServiceServicer_to_server(
        ConnectionServicer(parts.connections, parts.connection_ops),
        server,
    )
    pipelines_pb2_grpc.add_PipelineServiceServicer_to_server(
        PipelineServicer(parts.pipelines), server
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in SERVICE_NAMES:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    _report_listen_health(parts, health_servicer)
    reflection.enable(server, SERVICE_NAMES)

    port = _bind(server, settings)
    await server.start()
    log.info(
        "serving",
        extra={
            "address": settings.listen,
            "port": port,
            "tls": bool(settings.tls_cert),
            "client_certificates": "required" if settings.tls_client_ca else "no",
        },
    )
    if settings.worker_processes > 0 and settings.worker_concurrency > 0:
        parts.workers = WorkerSupervisor(
            settings.worker_processes, worker_settings(settings, port, parts.worker_token)
        )
        parts.workers.start()
    running = Running(server, port, health_servicer, settings, parts)
    try:
        running.http = await serve_monitor(settings, parts, clock)
    except BaseException:
        await running.stop(grace=0)
        raise
    return running


def _report_listen_health(parts: Services, servicer: health.aio.HealthServicer) -> None:
    """LISTEN_HEALTH follows the listener's verdict, in order."""
    verdicts: asyncio.Queue[bool] = asyncio.Queue()
    parts.listener.health_handlers.append(lambda healthy, _: verdicts.put_nowait(healthy))
    verdicts.put_nowait(parts.listener.delivering)

    async def report() -> None:
        serving = health_pb2.HealthCheckResponse.SERVING
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        while True:
            await servicer.set(LISTEN_HEALTH, serving if await verdicts.get() else not_serving)

    parts.background.append(asyncio.create_task(report(), name="setu-listen-health"))


def _bind(server: grpc.aio.Server, settings: Settings) -> int:
    if settings.tls_cert:
        key = Path(settings.tls_key).read_bytes()
        cert = Path(settings.tls_cert).read_bytes()
        client_ca = Path(settings.tls_client_ca).read_bytes() if settings.tls_client_ca else None
        credentials = grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
        )
        port: int = server.add_secure_port(settings.listen, credentials)
    else:
        port = server.add_insecure_port(settings.listen)
    if port == 0:
        raise SystemExit(f"cannot listen on {settings.listen}")
    return port


@contextlib.asynccontextmanager
async def serving(
    settings: Settings, clock: Clock | None = None, process: int | None = None
) -> AsyncIterator[Running]:
    """The whole server for the length of a `with` block."""
    async with contextlib.AsyncExitStack() as stack:
        url = await database_url(settings, stack)
        running = await start(settings, url, clock, process)
        try:
            yield running
        finally:
            await running.stop()


# Collector thresholds once startup is frozen. Young collections every 2,000
# allocations rather than 700, so what merely lives across an await is
# promoted less, while a middle collection (about 20,000 objects) stays
# short. A full collection walks everything parked calls hold (tens of
# objects per parked wait: 2.5 s with 50,000 parked on a busy 2-core machine,
# and CPython 3.11 cannot do it in steps), so it runs after 1,000 middle
# collections (20 million allocations) rather than 10; most cyclic garbage
# dies young anyway. scripts/bench_park.py shows the pauses.
GC_THRESHOLDS = (2_000, 10, 1_000)


def tune_gc() -> None:
    """Once the server is up: what startup allocated (modules, protobuf
    descriptors, settings, pools) lives as long as the process, so move it out
    of the collector's sight (`gc.freeze`), and collect the young generation
    less often. Full collections then walk only what calls hold, not the
    hundreds of thousands of objects every import left behind."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def serve_until_signalled(settings: Settings, process: int | None = None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with serving(settings, process=process) as running:
        tune_gc()
        print(f"setu-server listening on port {running.port}", flush=True)
        if running.http_url:
            print(f"setu-server monitor on {running.http_url}", flush=True)
        await stop.wait()
        log.info("shutting down", extra={"grace_seconds": settings.grace_seconds})
