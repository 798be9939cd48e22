"""setu-agent: the edge runtime. It opens no ports: it asks the server for work.

This first version checks in and reports what the server answered; leasing
and the data-plane engine arrive with the runtimes issue.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform

import grpc

from setu_client._proto.setu.v1 import agents_pb2, agents_pb2_grpc
from setu_client.channel import open_channel
from setu_client.errors import from_rpc_error

VERSION = "0.1.0"


async def check_in(server: str, token: str, tls: bool) -> agents_pb2.CheckInResponse:
    async with open_channel(server, token, tls=tls) as channel:
        stub = agents_pb2_grpc.AgentServiceStub(channel)
        try:
            answer: agents_pb2.CheckInResponse = await stub.CheckIn(
                agents_pb2.CheckInRequest(version=VERSION, hostname=platform.node()), timeout=15
            )
            return answer
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from exc


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="setu-agent", description=__doc__)
    parser.add_argument("--server", default=os.environ.get("SETU_SERVER", "127.0.0.1:50051"))
    parser.add_argument("--token", default=os.environ.get("SETU_AGENT_TOKEN", ""))
    parser.add_argument("--tls", action="store_true", default=bool(os.environ.get("SETU_TLS")))
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("an agent token is required (--token or SETU_AGENT_TOKEN)")
    answer = asyncio.run(check_in(args.server, args.token, args.tls))
    print(f"checked in as agent {answer.agent_id} of workspace {answer.workspace_id}")


if __name__ == "__main__":
    main()
