"""setu-agent: the edge runtime. It opens no ports: it asks setu-server for
work (LeaseTask), runs it inside the private network, and reports back.

Configured by flags or environment (SETU_*), listed by `setu-agent --help`.
A credential the server refuses, or a file that cannot be read, ends it with
one line on stderr and exit code 2; an unreachable server is waited for.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from setu_agent.handlers import EngineHandlers, load_extra
from setu_agent.runtime import Runtime
from setu_agent.runtime.grpc_source import GrpcTaskSource
from setu_agent.runtime.loop import REPORT_GRACE_SECONDS, backoff
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client.channel import open_channel
from setu_client.diagnose import Outage
from setu_client.errors import PermissionDenied, SetuError, Unauthenticated
from setu_client.long_poll import LongPollWindow, add_long_poll_option
from setu_client.tls import add_tls_options, tls_from_options
from setu_engine.staged.blob import BlobSettings
from setu_engine.staged.resumable import DEFAULT_MIN_BYTES, ResumePolicy
from setu_engine.support.secrets import SecretStore

VERSION = "0.1.0"
log = logging.getLogger("setu.agent")


def _env(name: str, default: str = "") -> str:
    return os.environ.get(f"SETU_{name}", default)


DESCRIPTION = """The edge runtime: it opens no ports, asks setu-server for work
(LeaseTask), runs it inside this network, and reports back. Each flag has an
environment variable. Exit codes: 0 stopped by SIGINT/SIGTERM; 2 a refused
token, or a bad flag or file."""

EXIT_REFUSED = 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="setu-agent", description=DESCRIPTION)
    p.add_argument(
        "--server",
        default=_env("SERVER", "127.0.0.1:50051"),
        help="setu-server address (env SETU_SERVER)",
    )
    p.add_argument(
        "--token", default=_env("AGENT_TOKEN"), help="this agent's token (env SETU_AGENT_TOKEN)"
    )
    add_tls_options(p)
    p.add_argument(
        "--concurrency",
        type=int,
        default=int(_env("AGENT_CONCURRENCY", "4")),
        help="tasks run at once (env SETU_AGENT_CONCURRENCY)",
    )
    p.add_argument(
        "--secrets-file",
        default=_env("SECRETS_FILE"),
        help="JSON file of secret name -> value; else secrets come from the "
        "environment (env SETU_SECRETS_FILE)",
    )
    p.add_argument(
        "--blob-url",
        default=_env("BLOB_URL"),
        help="override the staging location the server names (env SETU_BLOB_URL)",
    )
    p.add_argument(
        "--batch-rows",
        type=int,
        default=int(_env("AGENT_BATCH_ROWS", "100000")),
        help="rows per batch: the grain of progress and cancel (env SETU_AGENT_BATCH_ROWS)",
    )
    p.add_argument(
        "--resumable-load-min-bytes",
        type=int,
        default=int(_env("AGENT_RESUMABLE_LOAD_MIN_BYTES", str(DEFAULT_MIN_BYTES))),
        help="a staged stream of several parts and this many bytes loads part by part "
        "(env SETU_AGENT_RESUMABLE_LOAD_MIN_BYTES)",
    )
    add_long_poll_option(p)
    p.add_argument(
        "--grace-seconds",
        type=float,
        default=float(_env("GRACE_SECONDS", "30")),
        help="on SIGTERM, how long running tasks may finish (env SETU_GRACE_SECONDS)",
    )
    p.add_argument(
        "--report-grace-seconds",
        type=float,
        default=float(_env("REPORT_GRACE_SECONDS", str(REPORT_GRACE_SECONDS))),
        help="on SIGTERM, how much longer a result report in flight may take before its "
        "task is left to its lease's expiry (env SETU_REPORT_GRACE_SECONDS)",
    )
    p.add_argument(
        "--extra-handlers",
        default=_env("AGENT_EXTRA_HANDLERS"),
        help="MODULE:NAME of extra task handlers (env SETU_AGENT_EXTRA_HANDLERS)",
    )
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "info"))
    return p


def blob_override(url: str) -> BlobSettings | None:
    """The agent's own view of the staging location, when its mount or bucket
    differs from the server's: a folder, or s3://bucket."""
    if not url:
        return None
    if url.startswith("s3://"):
        return BlobSettings("s3", url[len("s3://") :].strip("/"), _env("S3_ENDPOINT_URL"))
    return BlobSettings("local", str(Path(url).resolve()))


async def run(args: argparse.Namespace) -> None:
    secrets = SecretStore.from_file(Path(args.secrets_file) if args.secrets_file else None)
    async with open_channel(args.server, args.token, tls=args.tls_config) as ch:
        source = GrpcTaskSource(
            ch,
            LongPollWindow(args.server, args.long_poll_seconds),
            target=args.server,
            reconnect=lambda target: open_channel(target, args.token, tls=args.tls_config),
        )
        engine = EngineHandlers(
            secrets,
            source,
            blob_override=blob_override(args.blob_url),
            batch_rows=args.batch_rows,
            resume=ResumePolicy(args.resumable_load_min_bytes),
        )
        handlers = engine.table()
        if args.extra_handlers:
            handlers |= load_extra(args.extra_handlers)
        runtime = Runtime(
            source,
            handlers,
            name="setu-agent",
            concurrency=args.concurrency,
            sign_off=source.sign_off,
            report_grace_seconds=args.report_grace_seconds,
            server_outage=Outage(args.server, tls=args.tls_config is not None),
        )
        try:
            await serve(runtime, source, sorted(handlers), args.grace_seconds, args.server)
        finally:
            await source.close()  # the channels it opened moving off closing replicas


async def serve(
    runtime: Runtime,
    source: GrpcTaskSource,
    kinds: list[str],
    grace_seconds: float,
    server: str,
    checked_in: Callable[[pb.CheckInResponse], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Checks in (until the server answers), runs tasks until SIGINT/SIGTERM
    (or `stop`), then lets running tasks finish within the grace period."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    answered = asyncio.create_task(_check_in(source, kinds, runtime.server_outage))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({answered, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        answered.cancel()
        return
    answer = answered.result()
    runtime.set_lease_ttl(answer.lease_ttl_seconds or 60)
    if checked_in is not None:
        checked_in(answer)
    log.info("checked in", extra={"agent_id": answer.agent_id, "server": server})
    working = asyncio.create_task(runtime.run())
    await stop.wait()
    log.info("stopping", extra={"grace_seconds": grace_seconds})
    await runtime.stop(grace_seconds)
    await working


async def _check_in(
    source: GrpcTaskSource, kinds: list[str], server_outage: Outage
) -> pb.CheckInResponse:
    """Until the server answers: it may not be up yet (or not reachable:
    `server_outage` says why, once)."""
    answer: pb.CheckInResponse | None = None
    async for attempt in backoff(who="setu-agent", server_outage=server_outage):
        with attempt:
            answer = await source.check_in(VERSION, kinds, platform.node())
    # After the loop, not from inside it: its last turn tells server_outage.
    assert answer is not None  # tenacity retries until an answer, or raises
    return answer


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if not args.token:
        parser().error("an agent token is required (--token or SETU_AGENT_TOKEN)")
    from setu_client import logs  # the same structured log lines as the server

    logs.configure(args.log_level, "json")
    try:
        args.tls_config = tls_from_options(args)
        asyncio.run(run(args))
    except ValueError as exc:  # a client certificate without its key
        sys.exit(_one_line(str(exc)))
    except OSError as exc:  # a certificate or key, the secrets file
        sys.exit(_one_line(f"cannot read {exc.filename}: {exc.strerror or exc}"))
    except (Unauthenticated, PermissionDenied) as exc:
        sys.exit(
            _one_line(
                f"{args.server} refused the agent token: {exc.message}; pass the token "
                "`setu admin agent create` printed, with --token or SETU_AGENT_TOKEN"
            )
        )
    except SetuError as exc:
        sys.exit(_one_line(f"{args.server} answered {exc.code.name}: {exc.message}"))


def _one_line(message: str) -> int:
    print(f"setu-agent: error: {message}", file=sys.stderr)
    return EXIT_REFUSED


if __name__ == "__main__":
    main()
