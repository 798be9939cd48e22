"""Tasks from setu-server over gRPC: how an agent asks for work."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.json_format import ParseDict

from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc
from setu_client.errors import ServerClosing, SetuError, Unimplemented, from_rpc_error
from setu_client.long_poll import LongPollWindow
from setu_client.replicas import Replicas
from setu_tasks.codec.agents import completion, extract_spec_of, leased_task, load_spec_of
from setu_tasks.results import TaskResult
from setu_tasks.specs import ExtractSpec, LeasedTask, LoadSpec

# Room above the server's wait that a lease's window should leave, so the
# server's empty answer wins the race (docs/jobs-and-tasks.md); the window
# itself (setu_client/long_poll.py) is the call's deadline.
LEASE_TIMEOUT_MARGIN_SECONDS = 15.0
CALL_TIMEOUT_SECONDS = 30.0
# A stopping runtime does not wait long to say so: the presence window covers a miss.
SIGN_OFF_TIMEOUT_SECONDS = 5.0


class GrpcTaskSource:
    def __init__(
        self,
        channel: grpc.aio.Channel,
        long_polls: LongPollWindow | None = None,
        *,
        target: str = "",
        reconnect: Callable[[str], grpc.aio.Channel] | None = None,
    ) -> None:
        self._stub = agents_pb2_grpc.AgentServiceStub(channel)
        # LeaseTask's deadline, shortened below whatever cuts it on the way.
        self.long_polls = long_polls or LongPollWindow("setu-server")
        # A replica that is shutting down refuses LeaseTask (ServerClosing):
        # with `reconnect` and a target of several addresses the runtime
        # moves every call to the next one at once (setu_client/replicas.py);
        # heartbeats and reports follow, since any replica takes them.
        self._replicas = Replicas(target)
        self._reconnect = reconnect
        self._rotation = 0
        self._channels: list[grpc.aio.Channel] = []
        self._retiring: set[asyncio.Task[None]] = set()

    async def check_in(self, version: str, capabilities: list[str], hostname: str) -> Any:
        request = pb.CheckInRequest(version=version, capabilities=capabilities, hostname=hostname)
        return await self._call(self._stub.CheckIn, request)

    async def sign_off(self, reason: str) -> None:
        """Tells the server this runtime is stopping (offline at once)."""
        request = pb.SignOffRequest(reason=reason[:200])
        await self._call(self._stub.SignOff, request, timeout=SIGN_OFF_TIMEOUT_SECONDS)

    async def lease(self, wait_seconds: float, max_tasks: int = 1) -> list[LeasedTask]:
        """Up to `max_tasks` tasks (the runtime's free slots), none after the
        wait or the long-poll window, whichever ends first (the server answers
        a second before the window). A call that something in between cuts
        (a proxy's 504) comes back empty, as a wait that found nothing: it
        is no failure, and the window learns from it."""
        loop = asyncio.get_running_loop()
        moves = 0
        while True:
            window = self.long_polls.window()
            sent = loop.time()
            try:
                answer: pb.LeaseTaskResponse = await self._call(
                    self._stub.LeaseTask,
                    pb.LeaseTaskRequest(wait_seconds=int(wait_seconds), max_tasks=max_tasks),
                    timeout=window,
                )
            except ServerClosing:
                # Each address once; if every one is closing, back off as usual.
                if moves < self._replicas.count - 1 and self._move():
                    moves += 1
                    continue
                raise
            except SetuError as error:
                if self.long_polls.on_error(error.code, error.message, loop.time() - sent):
                    return []
                raise
            break
        self.long_polls.on_answer(loop.time() - sent)
        # A server that predates max_tasks answers one, in `task`.
        tasks = list(answer.tasks) or ([answer.task] if answer.HasField("task") else [])
        return [leased_task(task) for task in tasks]

    async def heartbeat(self, task: LeasedTask, progress: dict[str, Any]) -> bool:
        request = pb.HeartbeatRequest(
            task_id=task.id,
            lease_token=task.lease_token,
            progress=ParseDict(progress, pb.TaskProgress()),
        )
        answer: pb.HeartbeatResponse = await self._call(self._stub.Heartbeat, request)
        return answer.cancel_requested

    async def extract_spec(self, task: LeasedTask) -> ExtractSpec:
        request = pb.GetExtractSpecRequest(task_id=task.id, lease_token=task.lease_token)
        spec: pb.ExtractSpec = await self._call(self._stub.GetExtractSpec, request)
        return extract_spec_of(spec)

    async def load_spec(self, task: LeasedTask) -> LoadSpec:
        request = pb.GetLoadSpecRequest(task_id=task.id, lease_token=task.lease_token)
        spec: pb.LoadSpec = await self._call(self._stub.GetLoadSpec, request)
        return load_spec_of(spec)

    async def complete(
        self, task: LeasedTask, result: TaskResult, *, lease_next: bool = False
    ) -> LeasedTask | None:
        """Report success; with `lease_next`, the runtime's next task comes
        back in the same answer (an eager lease), when one is waiting."""
        request = completion(task, result)
        request.lease_next = lease_next
        answer: pb.CompleteTaskResponse = await self._call(self._stub.CompleteTask, request)
        return leased_task(answer.next) if answer.HasField("next") else None

    async def fail(self, task: LeasedTask, error: str, retryable: bool) -> None:
        request = pb.FailTaskRequest(
            task_id=task.id,
            lease_token=task.lease_token,
            error_message=error[:10_000] or "failed",
            retryable=retryable,
        )
        await self._call(self._stub.FailTask, request)

    async def release(
        self, task: LeasedTask, message: str, *, checkpoint: str = "", outage: bool = False
    ) -> None:
        request = pb.ReleaseTaskRequest(
            task_id=task.id,
            lease_token=task.lease_token,
            reason=pb.RELEASE_REASON_OUTAGE if outage else pb.RELEASE_REASON_DRAIN,
            checkpoint=checkpoint[:500],
            message=message[:10_000],
        )
        try:
            await self._call(self._stub.ReleaseTask, request)
        except Unimplemented:
            # A server that predates ReleaseTask: a retryable failure, as before.
            await self.fail(task, message, True)

    def _move(self) -> bool:
        """Every call from now on to the target's next address; False when
        there is no other. The previous channel is left to the calls still on
        it (heartbeats, a report), and closed with the others by `close`."""
        if self._reconnect is None or not self._replicas.many:
            return False
        self._rotation += 1
        channel = self._reconnect(self._replicas.rotated(self._rotation))
        if self._channels:  # one this source opened: closed once its calls are done
            retiring = self._channels.pop()
            closing = asyncio.create_task(retiring.close(grace=CALL_TIMEOUT_SECONDS))
            self._retiring.add(closing)
            closing.add_done_callback(self._retiring.discard)
        self._channels.append(channel)
        self._stub = agents_pb2_grpc.AgentServiceStub(channel)
        return True

    async def close(self) -> None:
        """Closes the channels `_move` opened (not the one it was given)."""
        for channel in self._channels:
            await channel.close(grace=None)
        self._channels.clear()
        await asyncio.gather(*self._retiring, return_exceptions=True)

    async def _call(self, method: Any, request: Any, timeout: float = CALL_TIMEOUT_SECONDS) -> Any:
        try:
            return await method(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from exc
