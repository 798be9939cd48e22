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
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from setu_agent.cloud.book import GrpcRunBook
from setu_agent.cloud.connections import IDLE_SECONDS, ConnectionCache
from setu_agent.cloud.migrate import Migrate, MigrateSettings
from setu_agent.cloud.policy import CloudPolicy, cloud_egress
from setu_agent.handlers import EngineHandlers
from setu_agent.main import serve
from setu_agent.runtime import Handler, Runtime
from setu_agent.runtime.grpc_source import GrpcTaskSource
from setu_agent.runtime.task import LeasedTask
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client.channel import open_channel
from setu_client.diagnose import Outage
from setu_client.long_poll import LongPollWindow, add_long_poll_option
from setu_client.tls import add_tls_options, tls_from_options
from setu_engine.staged.blob import BlobSettings, BlobStore, open_blob
from setu_engine.staged.resumable import DEFAULT_MIN_BYTES, ResumePolicy
from setu_engine.staged.s3 import S3Settings
from setu_engine.support.secrets import SecretStore

log = logging.getLogger("setu.worker")


def _env(name: str, default: str = "") -> str:
    return os.environ.get(f"SETU_{name}", default)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="setu-worker", description=__doc__)
    add = p.add_argument
    add("--server", default=_env("SERVER", "127.0.0.1:50051"), help="setu-server (SETU_SERVER)")
    add("--token", default=_env("WORKER_TOKEN"), help="the worker token (SETU_WORKER_TOKEN)")
    add_tls_options(p)
    add(
        "--concurrency",
        type=int,
        default=int(_env("WORKER_CONCURRENCY", "4")),
        help="tasks run at once (SETU_WORKER_CONCURRENCY)",
    )
    add(
        "--secrets-file",
        default=_env("SECRETS_FILE"),
        help='cloud secrets, {"workspaces": {"<id>": {NAME: value}}} (SETU_SECRETS_FILE)',
    )
    add(
        "--shared-secrets",
        default=_env("SHARED_SECRETS"),
        help="comma-separated names every workspace may use (SETU_SHARED_SECRETS)",
    )
    add(
        "--cloud-reach",
        default=_env("CLOUD_REACH", "restricted"),
        choices=("restricted", "local"),
        help="restricted, or local for one-person setups (SETU_CLOUD_REACH)",
    )
    add(
        "--cloud-allow-networks",
        default=_env("CLOUD_ALLOW_NETWORKS"),
        help="CIDRs cloud connections may reach although private (SETU_CLOUD_ALLOW_NETWORKS)",
    )
    add(
        "--local-files-root",
        default=_env("LOCAL_FILES_ROOT", ".setu/files"),
        help="the folder of the workspaces' cloud files (SETU_LOCAL_FILES_ROOT)",
    )
    add("--blob-access-key-id", default=_env("BLOB_ACCESS_KEY_ID"), help="(SETU_BLOB_*)")
    add("--blob-secret-access-key", default=_env("BLOB_SECRET_ACCESS_KEY"), help="(SETU_BLOB_*)")
    add("--blob-session-token", default=_env("BLOB_SESSION_TOKEN"), help="(SETU_BLOB_*)")
    add(
        "--batch-rows",
        type=int,
        default=int(_env("BATCH_ROWS", "100000")),
        help="rows per batch (SETU_BATCH_ROWS)",
    )
    add(
        "--direct-max-rows",
        type=int,
        default=int(_env("DIRECT_MAX_ROWS", "50000")),
        help="a fresh small cloud → cloud run copies directly (SETU_DIRECT_MAX_ROWS)",
    )
    add(
        "--resumable-load-min-bytes",
        type=int,
        default=int(_env("RESUMABLE_LOAD_MIN_BYTES", str(DEFAULT_MIN_BYTES))),
        help="a staged stream of several parts and this many bytes loads part by part "
        "(SETU_RESUMABLE_LOAD_MIN_BYTES)",
    )
    add(
        "--idle-connection-seconds",
        type=float,
        default=float(_env("WORKER_IDLE_CONNECTION_SECONDS", str(IDLE_SECONDS))),
        help="how long a run's connection stays open for the next run of the same "
        "connection; 0 closes each at once (SETU_WORKER_IDLE_CONNECTION_SECONDS)",
    )
    add_long_poll_option(p)
    add(
        "--grace-seconds",
        type=float,
        default=float(_env("GRACE_SECONDS", "30")),
        help="on SIGTERM, how long running tasks may finish (SETU_GRACE_SECONDS)",
    )
    add(
        "--exit-with-stdin",
        action="store_true",
        default=bool(_env("WORKER_SUPERVISED")),
        help="stop when standard input closes (set by setu-server for its own workers)",
    )
    add("--log-level", default=_env("LOG_LEVEL", "info"))
    add("--log-format", default=_env("LOG_FORMAT", "json"))
    return p


async def run(args: argparse.Namespace) -> None:
    secrets = SecretStore.from_file(
        Path(args.secrets_file) if args.secrets_file else None,
        isolated=True,
        shared=frozenset(n.strip() for n in args.shared_secrets.split(",") if n.strip()),
    )
    policy = CloudPolicy(Path(args.local_files_root)) if args.cloud_reach == "restricted" else None
    blob_keys = S3Settings(
        access_key_id=args.blob_access_key_id,
        secret_access_key=args.blob_secret_access_key,
        session_token=args.blob_session_token,
    )
    async with open_channel(args.server, args.token, tls=args.tls_config) as ch:
        source = GrpcTaskSource(ch, LongPollWindow(args.server, args.long_poll_seconds))

        def book(task: LeasedTask) -> GrpcRunBook:
            return GrpcRunBook(ch, task)

        @contextlib.asynccontextmanager
        async def blob(settings: BlobSettings) -> AsyncIterator[BlobStore]:
            store = open_blob(settings, blob_keys)
            try:
                yield store
            finally:
                await store.close()

        connections = ConnectionCache(idle_seconds=args.idle_connection_seconds)
        settings = MigrateSettings(
            batch_rows=args.batch_rows,
            direct_max_rows=args.direct_max_rows,
            resume=ResumePolicy(args.resumable_load_min_bytes),
        )
        handlers: dict[str, Handler] = {
            # The cloud's part of a run is `migrate`: no extract or load here.
            **EngineHandlers(secrets, batch_rows=args.batch_rows, policy=policy).table(),
            "migrate": Migrate(book, blob, secrets, settings, policy, connections),
        }
        runtime = Runtime(
            source,
            handlers,
            name="cloud worker",
            concurrency=args.concurrency,
            server_outage=Outage(args.server, tls=args.tls_config is not None),
        )

        def checked_in(answer: pb.CheckInResponse) -> None:
            if policy is not None:
                policy.egress = cloud_egress(
                    args.cloud_allow_networks,
                    answer.protected_endpoints,
                    answer.protected_local_ports,
                    answer.protected_socket_folders,
                )

        stop = asyncio.Event()
        watch = asyncio.create_task(_when_stdin_closes(stop)) if args.exit_with_stdin else None
        try:
            await serve(
                runtime, source, sorted(handlers), args.grace_seconds, args.server, checked_in, stop
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
    args = parser().parse_args(argv)
    if not args.token:
        parser().error("a worker token is required (--token or SETU_WORKER_TOKEN)")
    from setu_client import logs

    logs.configure(args.log_level, args.log_format)
    try:
        args.tls_config = tls_from_options(args)
    except (OSError, ValueError) as exc:
        parser().error(f"TLS: {exc}")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
