"""What grpcio's asyncio API costs on this machine before Setu does any work.

Two floors that bound Setu's own figures:
  - memory: RSS per parked unary call on a bare grpc.aio server whose handler
    only awaits an event (a WaitJob can cost no less);
  - throughput: unary calls per second, 16 concurrent callers in one process
    against a bare server in another, handler returning at once (a task's
    lease + complete is two such calls).

    python scripts/bench_grpc_floor.py [--parked 20000] [--calls 20000] [--processes 1]

--processes N serves from N bare server processes sharing the port
(SO_REUSEPORT), as `setu-server --processes N` does: the floor for it.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVER_OPTIONS = [
    ("grpc.server.max_pending_requests", 100_000),
    ("grpc.server.max_pending_requests_hard_limit", 200_000),
    ("grpc.server_max_unrequested_time_in_server", 300),
]


class Parking(health_pb2_grpc.HealthServicer):
    """Check parks until released; a service name of "now" answers at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def Check(self, request: health_pb2.HealthCheckRequest, context: object) -> object:
        if request.service != "now":
            await self.release.wait()
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


async def serve(port: int, shared: bool = False) -> None:
    """A bare server; `shared`: one of several on the port."""
    options = [*SERVER_OPTIONS, ("grpc.so_reuseport", 1 if shared else 0)]
    server = grpc.aio.server(options=options)
    health_pb2_grpc.add_HealthServicer_to_server(Parking(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def start_floor(port: int, processes: int = 1) -> list[subprocess.Popen[bytes]]:
    """`processes` bare servers on `port` (stop them with stop_floor)."""
    command = [sys.executable, __file__, "--serve", str(port)]
    if processes > 1:
        command.append("--shared")
    return [subprocess.Popen(command) for _ in range(processes)]


def stop_floor(servers: list[subprocess.Popen[bytes]]) -> None:
    for proc in servers:
        proc.kill()
        proc.wait()


def _stubs(port: int, n: int = 4) -> list[health_pb2_grpc.HealthStub]:
    return [
        health_pb2_grpc.HealthStub(
            grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.channel_pool_index", i)])
        )
        for i in range(n)
    ]


async def measure(port: int, server: psutil.Process, parked: int, calls: int) -> None:
    stubs = _stubs(port)
    now = health_pb2.HealthCheckRequest(service="now")
    await stubs[0].Check(now, wait_for_ready=True, timeout=30)

    done = 0

    async def caller(i: int) -> None:
        nonlocal done
        while done < calls:
            await stubs[i % len(stubs)].Check(now)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(16)))
    rate = done / (time.perf_counter() - started)
    print(f"unary calls/s, 16 concurrent callers, empty handler: {rate:,.0f}")

    base = server.memory_info().rss
    waits = [
        stubs[i % len(stubs)].Check(health_pb2.HealthCheckRequest(), timeout=600)
        for i in range(parked)
    ]
    # Parked once the server has gone quiet (a benchmark may pace itself).
    for _ in range(240):
        if await asyncio.to_thread(server.cpu_percent, 0.5) < 5:
            break
    grown = server.memory_info().rss - base
    print(
        f"parked unary calls: {parked:,}; server RSS +{grown / 2**20:,.1f} MiB, "
        f"{grown / parked / 1024:.1f} KiB per call; "
        f"50,000 would need {(base + 50_000 * grown / parked) / 2**30:.2f} GiB"
    )
    for wait in waits:
        wait.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parked", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--shared", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.shared))
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    servers = start_floor(port, args.processes)
    try:
        # Memory is read from the first server (with several, it holds its share).
        asyncio.run(measure(port, psutil.Process(servers[0].pid), args.parked, args.calls))
    finally:
        stop_floor(servers)


if __name__ == "__main__":
    main()
