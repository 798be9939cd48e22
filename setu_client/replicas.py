"""Which server a client's long-polls reach, and telling when it went away.

A target may name several replicas (`ipv4:10.0.0.1:50051,10.0.0.2:50051`).
gRPC's pick_first stays on the first address that accepts a connection, and
a replica that is shutting down still accepts them until it stops: a client
that only retried would knock on it again and again. So a client told that
its server is closing (the CLOSING_KEY trailer, or ServerClosing) moves: its
long-poll channel is rebuilt with the addresses rotated, the closing one last
(`Replicas.rotated`). A target of one address has nowhere to go: the client
backs off until the server is back, and an `OutageListener` hears once that
it went away and once that it is back (the CLI prints both).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import grpc

from setu_client.errors import SetuError

# Name-resolver schemes whose target lists its addresses, comma-separated.
_LISTS = ("ipv4:", "ipv6:")


class Replicas:
    """The addresses of a target, when it lists more than one."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._scheme = ""
        self._addresses = [target]
        for scheme in _LISTS:
            if target.startswith(scheme):
                listed = [a.strip() for a in target[len(scheme) :].split(",") if a.strip()]
                if len(listed) > 1:
                    self._scheme, self._addresses = scheme, listed

    @property
    def many(self) -> bool:
        return len(self._addresses) > 1

    @property
    def count(self) -> int:
        return len(self._addresses)

    def rotated(self, by: int) -> str:
        """The target with its addresses rotated `by` places (pick_first then
        tries the one that was `by` places down first)."""
        if not self.many:
            return self.target
        shift = by % len(self._addresses)
        order = self._addresses[shift:] + self._addresses[:shift]
        return self._scheme + ",".join(order)


class OutageListener(Protocol):
    """Hears that long-polls lost their server, and that it is back."""

    def went_away(self, error: SetuError) -> None: ...

    def back(self) -> None: ...


class OutageWatch:
    """Tells a listener once when long-polls start failing, and once when the
    server is reachable again: when a long-poll channel is connected again
    after it lost its connection, or when a long-poll answers."""

    def __init__(self, listener: OutageListener | None) -> None:
        self._listener = listener
        self._away = False
        self._until_back: asyncio.Task[None] | None = None

    def failed(self, error: SetuError, channel: grpc.aio.Channel) -> None:
        if self._listener is None or self._away:
            return
        self._away = True
        self._listener.went_away(error)
        self._until_back = asyncio.create_task(self._connected_again(channel))

    def answered(self) -> None:
        if self._away:
            self._back()

    def close(self) -> None:
        if self._until_back is not None:
            self._until_back.cancel()

    def _back(self) -> None:
        self._away = False
        if self._listener is not None:
            self._listener.back()
        if self._until_back is not None and self._until_back is not asyncio.current_task():
            self._until_back.cancel()
        self._until_back = None

    async def _connected_again(self, channel: grpc.aio.Channel) -> None:
        # A closing server still holds the connection: first it goes, then
        # a connection to the server that is back comes.
        try:
            state = channel.get_state()
            while state is grpc.ChannelConnectivity.READY:
                await channel.wait_for_state_change(state)
                state = channel.get_state()
            while state is not grpc.ChannelConnectivity.READY:
                await channel.wait_for_state_change(state)
                state = channel.get_state(try_to_connect=True)
        except Exception:  # the channel was closed: the client is closing
            return
        if self._away:
            self._back()
