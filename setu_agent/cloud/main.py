"""setu-worker: the cloud runtime, a process apart from the server.

It runs every workspace's cloud connections (the `cloud` queue: runs'
`migrate` tasks, and tests, discovers and previews of cloud connections),
leasing over gRPC exactly as an agent does, and keeps a run's books through
the server. It holds no database URL and no admin token; the only
credentials it has are the ones given to it here: its worker token, the
cloud secrets file, the staging blob's. setu-server starts and supervises
`SETU_WORKER_PROCESSES` of them (setu_server/worker/supervisor.py); in
production they may run anywhere that reaches a server.

Configured by flags or environment (SETU_*); see `setu-worker --help`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from setu_agent.cloud.book import GrpcRunBook
from setu_agent.cloud.connections import ConnectionCache
from setu_agent.cloud.migrate import Migrate, MigrateSettings
from setu_agent.cloud.policy import CloudPolicy, LocalReach, cloud_egress
from setu_agent.handlers import EngineHandlers
from setu_agent.main import serve
from setu_agent.runtime import Handler, Runtime
from setu_agent.runtime.grpc_source import GrpcTaskSource
from setu_agent.settings import WORKER, RuntimeSettings
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client.channel import open_channel
from setu_client.diagnose import Outage
from setu_client.long_poll import LongPollWindow
from setu_client.tls import TlsConfig
from setu_client.version import add_version_flag
from setu_engine.movement.dry_run import SampleLimits
from setu_engine.staged.blob import BlobSettings, BlobStore, open_blob
from setu_engine.staged.resumable import ResumePolicy
from setu_engine.staged.s3 import S3Settings
from setu_engine.support.secrets import SecretStore
from setu_tasks.specs import LeasedTask

log = logging.getLogger("setu.worker")


def parser() -> argparse.ArgumentParser:
    made = RuntimeSettings.parser(WORKER, "setu-worker", __doc__)
    add_version_flag(made)
    return made


async def run(settings: RuntimeSettings, tls: TlsConfig | None) -> None:
    secrets = SecretStore.from_file(
        Path(settings.secrets_file) if settings.secrets_file else None,
        isolated=True,
        shared=frozenset(n.strip() for n in settings.shared_secrets.split(",") if n.strip()),
    )
    # Either reach takes a relative local path from the workspace's folder.
    policy: CloudPolicy | LocalReach = (
        CloudPolicy(Path(settings.local_files_root))
        if settings.cloud_reach == "restricted"
        else LocalReach(Path(settings.local_files_root))
    )
    blob_keys = S3Settings(
        access_key_id=settings.blob_access_key_id,
        secret_access_key=settings.blob_secret_access_key,
        session_token=settings.blob_session_token,
    )
    async with open_channel(settings.server, settings.token, tls=tls) as ch:
        source = GrpcTaskSource(ch, LongPollWindow(settings.server, settings.long_poll_seconds))

        def book(task: LeasedTask) -> GrpcRunBook:
            return GrpcRunBook(ch, task)

        @contextlib.asynccontextmanager
        async def blob(where: BlobSettings) -> AsyncIterator[BlobStore]:
            store = open_blob(where, blob_keys)
            try:
                yield store
            finally:
                await store.close()

        connections = ConnectionCache(idle_seconds=settings.idle_connection_seconds)
        migrate_settings = MigrateSettings(
            batch_rows=settings.batch_rows,
            direct_max_rows=settings.direct_max_rows,
            resume=ResumePolicy(settings.resumable_load_min_bytes),
            sample=SampleLimits(rows=settings.dry_run_sample_rows),
        )
        handlers: dict[str, Handler] = {
            # The cloud's part of a run is `migrate`: no extract or load here.
            **EngineHandlers(
                secrets,
                batch_rows=settings.batch_rows,
                policy=policy,
                sample=SampleLimits(rows=settings.dry_run_sample_rows),
            ).table(),
            "migrate": Migrate(book, blob, secrets, migrate_settings, policy, connections),
        }
        runtime = Runtime(
            source,
            handlers,
            name="cloud worker",
            concurrency=settings.concurrency,
            server_outage=Outage(settings.server, tls=tls is not None),
        )

        def checked_in(answer: pb.CheckInResponse) -> None:
            if isinstance(policy, CloudPolicy):
                policy.egress = cloud_egress(
                    settings.cloud_allow_networks,
                    answer.protected_endpoints,
                    answer.protected_local_ports,
                    answer.protected_socket_folders,
                )

        stop = asyncio.Event()
        watch = asyncio.create_task(_when_stdin_closes(stop)) if settings.exit_with_stdin else None
        try:
            await serve(
                runtime,
                source,
                sorted(handlers),
                settings.grace_seconds,
                settings.server,
                checked_in,
                stop,
            )
        finally:
            if watch is not None:
                watch.cancel()
            await connections.close()


async def _when_stdin_closes(stop: asyncio.Event) -> None:
    """The supervising server keeps our stdin open; EOF means it is gone."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass
    log.warning("the supervising server is gone; stopping")
    stop.set()


def main(argv: list[str] | None = None) -> None:
    settings = RuntimeSettings.from_args(parser().parse_args(argv))
    if not settings.token:
        parser().error("a worker token is required (--token or SETU_WORKER_TOKEN)")
    from setu_client import logs

    logs.configure(settings.log_level, settings.log_format)
    try:
        tls = settings.tls_config()
    except (OSError, ValueError) as exc:
        parser().error(f"TLS: {exc}")
    asyncio.run(run(settings, tls))


if __name__ == "__main__":
    main()
