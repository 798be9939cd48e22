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
import platform
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from setu_agent.handlers import EngineHandlers, load_extra
from setu_agent.runtime import Runtime
from setu_agent.runtime.grpc_source import GrpcTaskSource
from setu_agent.runtime.loop import backoff
from setu_agent.settings import AGENT, RuntimeSettings
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client.channel import open_channel
from setu_client.diagnose import Outage
from setu_client.errors import PermissionDenied, SetuError, Unauthenticated
from setu_client.long_poll import LongPollWindow
from setu_client.tls import TlsConfig
from setu_client.version import add_version_flag
from setu_engine.movement.dry_run import SampleLimits
from setu_engine.staged.blob import BlobSettings
from setu_engine.staged.resumable import ResumePolicy
from setu_engine.support.secrets import SecretStore

VERSION = "0.1.0"
log = logging.getLogger("setu.agent")


DESCRIPTION = """The edge runtime: it opens no ports, asks setu-server for work
(LeaseTask), runs it inside this network, and reports back. Each flag has an
environment variable. Exit codes: 0 stopped by SIGINT/SIGTERM; 2 a refused
token, or a bad flag or file."""

EXIT_REFUSED = 2


def parser() -> argparse.ArgumentParser:
    made = RuntimeSettings.parser(AGENT, "setu-agent", DESCRIPTION)
    add_version_flag(made)
    return made


def blob_override(url: str, endpoint_url: str = "") -> BlobSettings | None:
    """The agent's own view of the staging location, when its mount or bucket
    differs from the server's: a folder, or s3://bucket."""
    if not url:
        return None
    if url.startswith("s3://"):
        return BlobSettings("s3", url[len("s3://") :].strip("/"), endpoint_url)
    return BlobSettings("local", str(Path(url).resolve()))


async def run(settings: RuntimeSettings, tls: TlsConfig | None) -> None:
    secrets = SecretStore.from_file(Path(settings.secrets_file) if settings.secrets_file else None)
    async with open_channel(settings.server, settings.token, tls=tls) as ch:
        source = GrpcTaskSource(
            ch,
            LongPollWindow(settings.server, settings.long_poll_seconds),
            target=settings.server,
            reconnect=lambda target: open_channel(target, settings.token, tls=tls),
        )
        engine = EngineHandlers(
            secrets,
            source,
            blob_override=blob_override(settings.blob_url, settings.s3_endpoint_url),
            batch_rows=settings.batch_rows,
            resume=ResumePolicy(settings.resumable_load_min_bytes),
            sample=SampleLimits(rows=settings.dry_run_sample_rows),
        )
        handlers = engine.table()
        if settings.extra_handlers:
            handlers |= load_extra(settings.extra_handlers)
        runtime = Runtime(
            source,
            handlers,
            name="setu-agent",
            concurrency=settings.concurrency,
            sign_off=source.sign_off,
            report_grace_seconds=settings.report_grace_seconds,
            server_outage=Outage(settings.server, tls=tls is not None),
        )
        try:
            await serve(runtime, source, sorted(handlers), settings.grace_seconds, settings.server)
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
    settings = RuntimeSettings.from_args(parser().parse_args(argv))
    if not settings.token:
        parser().error("an agent token is required (--token or SETU_AGENT_TOKEN)")
    from setu_client import logs  # the same structured log lines as the server

    logs.configure(settings.log_level, "json")
    try:
        asyncio.run(run(settings, settings.tls_config()))
    except ValueError as exc:  # a client certificate without its key
        sys.exit(_one_line(str(exc)))
    except OSError as exc:  # a certificate or key, the secrets file
        sys.exit(_one_line(f"cannot read {exc.filename}: {exc.strerror or exc}"))
    except (Unauthenticated, PermissionDenied) as exc:
        sys.exit(
            _one_line(
                f"{settings.server} refused the agent token: {exc.message}; pass the token "
                "`setu admin agent create` printed, with --token or SETU_AGENT_TOKEN"
            )
        )
    except SetuError as exc:
        sys.exit(_one_line(f"{settings.server} answered {exc.code.name}: {exc.message}"))


def _one_line(message: str) -> int:
    print(f"setu-agent: error: {message}", file=sys.stderr)
    return EXIT_REFUSED


if __name__ == "__main__":
    main()
