"""SetuClient: the Python SDK for clients of Setu.

Short calls share one channel; long-polls (`wait_for_job`, `watch_job`) travel
on their own small pool of channels, so hundreds of parked waits never queue
behind or starve short calls. Every channel pings the server (HTTP/2
keepalive) so a silently dead peer is noticed.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import grpc
from google.protobuf import field_mask_pb2, struct_pb2
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    wait_random_exponential,
)
from tenacity.stop import stop_base

from setu_client._proto.setu.v1 import (
    agents_pb2,
    agents_pb2_grpc,
    common_pb2,
    connections_pb2,
    connections_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
    pipelines_pb2,
    pipelines_pb2_grpc,
)
from setu_client._types import (
    Agent,
    Job,
    JobEvent,
    JobKind,
    JobOutcome,
    JobOutputs,
    JobState,
    agent_from_message,
    event_from_message,
    job_from_message,
    outcome_from_message,
    outputs_from_message,
)
from setu_client.channel import open_channel
from setu_client.errors import (
    CLOSING_KEY,
    ClientClosed,
    DeadlineExceeded,
    FailedPrecondition,
    JobNotFound,
    JobNotStarted,
    NotFound,
    ServerClosing,
    SetuError,
    Unavailable,
    from_rpc_error,
)
from setu_client.long_poll import LongPollWindow
from setu_client.messages import (
    Connection,
    DiscoverStreamsResponse,
    Pipeline,
    PipelineState,
    PreviewStreamResponse,
    TestConnectionResponse,
)
from setu_client.replicas import OutageListener, OutageWatch, Replicas
from setu_client.tls import TlsConfig

T = TypeVar("T")

# The server's WaitJob cap (docs/jobs-and-tasks.md). A long-poll is sent with
# its window as its deadline (setu_client/long_poll.py) and the server answers
# a second before that; LONG_POLL_MARGIN_SECONDS is the room a blocking call
# leaves above the server's own wait.
SERVER_WAIT_CAP_SECONDS = 60.0
LONG_POLL_MARGIN_SECONDS = 15.0

# Codes worth retrying: the server is restarting, unreachable or overloaded.
# CANCELLED counts when we did not cancel: the server or transport did.
_TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


@dataclass(frozen=True)
class RetryPolicy:
    """Jittered exponential backoff for transient failures (UNAVAILABLE,
    DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, a CANCELLED the caller did not ask
    for).

    A short call (get_job, list_*, cancel_job, …) is retried for at most
    `budget_seconds` (15 s), so a call to a server that is down fails in
    seconds with Unavailable; delays start at `initial_seconds` and double
    up to `max_seconds`. Long-polls (`wait_for_job`, `watch_job`) are meant
    to outlast a server restart: they retry for `long_poll_budget_seconds`
    (5 min) and back off no further than `long_poll_max_seconds`, so a
    waiter learns of its job's end within about that long once an outage is
    over. Either budget bounds a run of consecutive failures, not the whole
    wait: every good answer starts a fresh one. A long-poll cut on its way
    (a proxy's 504 after the call was held) is no failure: it is re-issued
    at once and spends nothing of the budget.
    """

    initial_seconds: float = 0.1
    max_seconds: float = 5.0
    budget_seconds: float = 15.0
    long_poll_max_seconds: float = 2.0
    long_poll_budget_seconds: float = 300.0


class _LoopTimeBudget(stop_base):
    """Stop retrying once the budget has passed on the event loop's clock
    (tenacity's own delay stop reads the wall clock, which paused-clock tests
    cannot move)."""

    def __init__(self, budget: float) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._deadline = loop.time() + budget

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self._loop.time() >= self._deadline


class _Backoff:
    """RetryPolicy's jittered exponential delays for a long-poll that retries
    by hand (a stream); `reset()` after a good answer starts a fresh budget."""

    def __init__(self, policy: RetryPolicy, cap: float) -> None:
        self._policy = policy
        self._cap = cap
        self._failures = 0
        self._deadline: float | None = None

    def reset(self) -> None:
        self._failures = 0
        self._deadline = None

    async def pause(self, error: SetuError) -> None:
        """Sleep before the next attempt, or raise `error` once the budget is spent."""
        loop = asyncio.get_running_loop()
        if self._deadline is None:
            self._deadline = loop.time() + self._policy.long_poll_budget_seconds
        elif loop.time() >= self._deadline:
            raise error
        ceiling = min(self._cap, self._policy.initial_seconds * 2**self._failures)
        self._failures += 1
        await asyncio.sleep(random.uniform(0, ceiling))


class SetuClient:
    """An asyncio client for JobOrchestrationService.

    Use as `async with SetuClient(target, api_key) as client: ...`, or call
    `close()`. Errors are the classes of `setu_client.errors`; jobs come back
    as `Job` values, connections and pipelines as `setu_client.messages`.
    The list calls (`list_jobs`, `list_connections`, `list_pipelines`, `list_agents`,
    `job_events`) and `watch_job` are async iterators, read with `async for`;
    the rest are awaited. Short calls retry for 15 s, long-polls for 5 min
    (`RetryPolicy`).

    Long-polls (`wait_for_job`, `watch_job`) hold each call for at most
    `long_poll_seconds` (default SETU_LONG_POLL_SECONDS, else 55 s), sent as
    its deadline. Behind a proxy that cuts calls sooner, the client learns
    the cut, waits less per call (`long_polls`, a LongPollWindow, says how
    long) and never counts a cut against the retry budget.

    TLS: `tls=True` trusts the system's roots, or `root_certificates` (PEM)
    a private CA; a `TlsConfig` also carries a client certificate for a
    server that requires one (mutual TLS).
    """

    def __init__(
        self,
        target: str,
        api_key: str,
        *,
        tls: bool | TlsConfig = False,
        root_certificates: bytes | None = None,
        retry: RetryPolicy | None = None,
        long_poll_channels: int = 2,
        call_timeout: float = 30.0,
        wait_cap_seconds: float | None = None,
        long_poll_seconds: float | None = None,
        outage: OutageListener | None = None,
    ) -> None:
        if long_poll_channels < 1:
            raise ValueError("long_poll_channels must be at least 1")
        self.retry = retry or RetryPolicy()
        self._call_timeout = call_timeout
        if long_poll_seconds is None and wait_cap_seconds is not None:
            # The older spelling: the server's cap, with room above it.
            long_poll_seconds = wait_cap_seconds + LONG_POLL_MARGIN_SECONDS
        # The deadline of each long-poll, shortened below whatever cuts them
        # on the way (a proxy's read timeout) and probed back up now and then.
        self.long_polls = LongPollWindow(target, long_poll_seconds, now=_loop_time)

        def channel() -> grpc.aio.Channel:
            return open_channel(target, api_key, tls=tls, root_certificates=root_certificates)

        self._short = channel()
        # Distinct channel args keep grpc from sharing one connection between
        # them. After an outage a long-poll channel reconnects within the
        # long-poll backoff cap, not grpc's default of up to two minutes.
        reconnect_ms = max(int(self.retry.long_poll_max_seconds * 1000), 100)

        def long_channel(i: int, rotation: int) -> grpc.aio.Channel:
            return open_channel(
                self._replicas.rotated(rotation),
                api_key,
                tls=tls,
                root_certificates=root_certificates,
                options=[
                    ("grpc.channel_pool_index", i),
                    ("grpc.initial_reconnect_backoff_ms", min(reconnect_ms, 1000)),
                    ("grpc.max_reconnect_backoff_ms", reconnect_ms),
                ],
            )

        # A closing replica's answers move the long-polls to the target's
        # next address (setu_client/replicas.py): each channel is rebuilt
        # with the addresses rotated once more than the one it replaces.
        self._replicas = Replicas(target)
        self._long_channel = long_channel
        self._rotation = 0
        self._long = [long_channel(i, 0) for i in range(long_poll_channels)]
        self._long_rotations = [0] * long_poll_channels
        self._retired: set[asyncio.Task[None]] = set()
        self._outage = OutageWatch(outage)
        self._next_long = itertools.cycle(range(long_poll_channels))
        self._stub = jobs_pb2_grpc.JobOrchestrationServiceStub(self._short)
        self._long_stubs = [jobs_pb2_grpc.JobOrchestrationServiceStub(c) for c in self._long]
        self._closed = False

    async def __aenter__(self) -> SetuClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every channel; parked waits end with ClientClosed."""
        self._closed = True
        self._outage.close()
        for channel in (self._short, *self._long):
            await channel.close(grace=None)
        for retiring in list(self._retired):
            retiring.cancel()
        await asyncio.gather(*self._retired, return_exceptions=True)

    # -- jobs

    async def get_job(self, job_id: str) -> Job:
        request = jobs_pb2.GetJobRequest(job_id=job_id)
        answer: jobs_pb2.GetJobResponse = await self._retrying(
            self._call, self._stub.GetJob, request, job_id
        )
        return job_from_message(answer.job)

    async def start_job(self, job_id: str) -> Job:
        """Moves a READY job on. Raises IllegalTransition once it has started."""
        request = jobs_pb2.StartJobRequest(job_id=job_id)
        answer: jobs_pb2.StartJobResponse = await self._call(
            self._stub.StartJob, request, job_id=job_id
        )
        return job_from_message(answer.job)

    async def cancel_job(self, job_id: str, reason: str = "") -> Job:
        """Idempotent: cancelling an ended job returns it unchanged."""
        request = jobs_pb2.CancelJobRequest(job_id=job_id, reason=reason)
        answer: jobs_pb2.CancelJobResponse = await self._retrying(
            self._call, self._stub.CancelJob, request, job_id
        )
        return job_from_message(answer.job)

    async def list_jobs(
        self,
        *,
        states: Sequence[JobState] = (),
        kinds: Sequence[JobKind] = (),
        pipeline_id: str = "",
        page_size: int = 100,
    ) -> AsyncIterator[Job]:
        """Every matching job, newest first, fetched a page at a time.

        An async iterator, not a coroutine: `async for job in
        client.list_jobs(...)`, or `[j async for j in client.list_jobs()]`."""
        token = ""
        while True:
            request = jobs_pb2.ListJobsRequest(
                states=[_wire(common_pb2.JobState, s) for s in states],
                kinds=[_wire(common_pb2.JobKind, k) for k in kinds],
                pipeline_id=pipeline_id,
                page_size=page_size,
                page_token=token,
            )
            page = await self._call(self._stub.ListJobs, request)
            for job in page.jobs:
                yield job_from_message(job)
            token = page.next_page_token
            if not token:
                return

    async def job_events(self, job_id: str, *, after_sequence: int = 0) -> AsyncIterator[JobEvent]:
        """The job's timeline, oldest first; an async iterator (`async for`)."""
        token = ""
        while True:
            request = jobs_pb2.ListJobEventsRequest(
                job_id=job_id, after_sequence=after_sequence, page_size=500, page_token=token
            )
            page = await self._call(self._stub.ListJobEvents, request, job_id=job_id)
            for event in page.events:
                yield event_from_message(event)
            token = page.next_page_token
            if not token:
                return

    async def job_outputs(self, job_id: str) -> JobOutputs:
        """What the job's run moved, per stream and in total."""
        request = jobs_pb2.GetJobOutputsRequest(job_id=job_id)
        answer: jobs_pb2.GetJobOutputsResponse = await self._call(
            self._stub.GetJobOutputs, request, job_id=job_id
        )
        return outputs_from_message(answer)

    # -- long polls

    async def wait_for_job(self, job_id: str, timeout: float | None = None) -> JobOutcome:
        """Block until the job is terminal; returns its state, error and version.

        No overall deadline unless `timeout` (seconds) is given, then
        TimeoutError. Raises JobNotStarted for a READY job and JobNotFound
        for an unknown one; transient failures are retried (see RetryPolicy).
        Each call is held for the long-poll window at most; one that
        something in between cuts (a proxy's 504) is re-issued at once,
        spends no retry budget, and teaches the window (`long_polls`).
        """
        loop = asyncio.get_running_loop()
        backoff = _Backoff(self.retry, self.retry.long_poll_max_seconds)
        moves = 0  # consecutive moves off closing replicas: each address once
        async with asyncio.timeout(timeout):
            while True:
                window = self.long_polls.window()
                sent = loop.time()
                index = self._pick_long()
                channel = self._long[index]
                try:
                    answer, closing = await self._wait_once(index, job_id, window)
                except SetuError as error:
                    if self._closed:
                        raise
                    held = loop.time() - sent
                    if self.long_polls.on_error(error.code, error.message, held):
                        continue  # cut on the way: at once, and no budget spent
                    if error.code not in _TRANSIENT:
                        raise
                    movable = isinstance(error, ServerClosing) and moves < self._replicas.count
                    if movable and self._shed(index, channel):
                        moves += 1
                        continue  # moved to another replica: at once
                    self._outage.failed(error, channel)
                    await backoff.pause(error)
                    continue
                self.long_polls.on_answer(loop.time() - sent)
                backoff.reset()
                moves = 0
                self._outage.answered()
                if answer.terminal:
                    return outcome_from_message(answer)
                if closing:
                    self._shed(index, channel)

    async def _wait_once(
        self, index: int, job_id: str, window: float
    ) -> tuple[jobs_pb2.WaitJobResponse, bool]:
        """One WaitJob on long-poll channel `index`: the answer, and whether
        the server said it is closing."""
        if self._closed:
            raise ClientClosed("the client is closed")
        call = self._long_stubs[index].WaitJob(
            jobs_pb2.WaitJobRequest(job_id=job_id), timeout=window
        )
        try:
            answer: jobs_pb2.WaitJobResponse = await call
        except grpc.aio.AioRpcError as exc:
            error = self._translate(exc, job_id)
            # WaitJob's contract gives these codes one meaning each, reason or not.
            if isinstance(error, NotFound) and not isinstance(error, JobNotFound):
                error = JobNotFound(error.message, job_id=job_id)
            elif isinstance(error, FailedPrecondition) and not isinstance(error, JobNotStarted):
                error = JobNotStarted(error.message, job_id=job_id)
            error.rpc_error = exc
            # grpc's error adds nothing a reader needs chained under ours;
            # it stays at hand as error.rpc_error (errors.py).
            raise error from None
        except asyncio.CancelledError:
            if self._closed:  # grpc cancels the calls of a channel being closed
                raise ClientClosed("the client was closed during the call") from None
            raise
        return answer, _closing(await call.trailing_metadata())

    def _pick_long(self) -> int:
        """The long-poll channel for the next call: the next in turn, unless
        it is still failing to connect while another is connected. After an
        outage each channel reconnects on its own backoff; a call sent to
        one still waiting fails at once, and would report the server gone
        again just after another channel found it back."""
        index = next(self._next_long)
        if self._long[index].get_state() is not grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            return index
        for other, channel in enumerate(self._long):
            if channel.get_state() is grpc.ChannelConnectivity.READY:
                return other
        return index

    def _shed(self, index: int, used: grpc.aio.Channel) -> bool:
        """Move long-poll channel `index` off a replica that said it is
        closing, to the target's next address; False when the target has no
        other. A channel already moved since `used` made the call stays."""
        if not self._replicas.many or self._closed:
            return False
        if self._long[index] is not used:
            return True
        if self._long_rotations[index] == self._rotation:
            self._rotation += 1
        self._long[index] = self._long_channel(index, self._rotation)
        self._long_rotations[index] = self._rotation
        self._long_stubs[index] = jobs_pb2_grpc.JobOrchestrationServiceStub(self._long[index])
        # Calls still on the old channel are being answered by the closing
        # server at once; let them land, then close it.
        retiring = asyncio.create_task(used.close(grace=self.long_polls.window()))
        self._retired.add(retiring)
        retiring.add_done_callback(self._retired.discard)
        return True

    async def watch_job(self, job_id: str, from_version: int = 0) -> AsyncIterator[Job]:
        """Snapshots of the job as it changes, ending after the terminal one.

        A stream that drops, or that a closing server ends before the
        terminal snapshot, is resumed from the last version seen (on whichever
        server the channel reaches next), so no snapshot is repeated and the
        generator never ends without the terminal one. Transient failures
        back off as `RetryPolicy` says for long-polls. A stream lasts one
        long-poll window at most (the server ends it a second before), and
        one that something in between cuts is resumed at once, as a cut
        `wait_for_job` call is.
        """
        loop = asyncio.get_running_loop()
        seen = from_version
        backoff = _Backoff(self.retry, self.retry.long_poll_max_seconds)
        moves = 0  # consecutive moves off closing replicas: each address once
        while True:
            if self._closed:
                raise ClientClosed("the client is closed")
            window = self.long_polls.window()
            index = self._pick_long()
            channel = self._long[index]
            stream = self._long_stubs[index].WatchJob(
                jobs_pb2.WatchJobRequest(job_id=job_id, from_version=seen), timeout=window
            )
            error: SetuError
            # The stream is held between messages, not over its whole life:
            # that is what a proxy's read timeout counts.
            sent = opened = loop.time()
            try:
                async for answer in stream:
                    job = job_from_message(answer.job)
                    seen = job.version
                    backoff.reset()
                    moves = 0
                    self._outage.answered()
                    sent = loop.time()
                    yield job
                    if job.terminal:
                        return
            except grpc.aio.AioRpcError as exc:
                error = self._translate(exc, job_id)
                if self._closed:
                    raise error from None
                held = loop.time() - sent
                if isinstance(error, DeadlineExceeded) and loop.time() - opened >= window - 1.5:
                    # Our own deadline: the window ended with nothing new.
                    self.long_polls.on_answer(held)
                    backoff.reset()
                    continue
                if self.long_polls.on_error(error.code, error.message, held):
                    backoff.reset()
                    continue
                if error.code not in _TRANSIENT:
                    raise error from None  # grpc's error is error.rpc_error
                movable = isinstance(error, ServerClosing) and moves < self._replicas.count
                if movable and self._shed(index, channel):
                    moves += 1
                    continue  # moved to another replica: resume there at once
            else:
                closing = _closing(await stream.trailing_metadata())
                if closing and moves < self._replicas.count and self._shed(index, channel):
                    moves += 1
                    continue  # a closing replica ended it: resume on another at once
                if loop.time() - opened >= window - 1.5:
                    # The server ended the stream at the window, the job
                    # unchanged: resume at once.
                    self.long_polls.on_answer(loop.time() - sent)
                    backoff.reset()
                    continue
                # Ended without the terminal snapshot: the server is closing,
                # or the caller already had the latest version. Only the job
                # itself can tell which.
                job = await self.get_job(job_id)
                if job.terminal:
                    if job.version > seen:
                        yield job
                    return
                error = Unavailable(f"the watch of job {job_id} ended before the job did")
            finally:
                stream.cancel()
            self._outage.failed(error, channel)
            await backoff.pause(error)

    # -- plumbing

    async def _call(
        self, method: Any, request: Any, job_id: str = "", *, timeout: float | None = None
    ) -> Any:
        """One attempt. `job_id` names the job the call is about, for the
        errors that carry it."""
        if self._closed:
            raise ClientClosed("the client is closed")
        try:
            return await method(request, timeout=timeout or self._call_timeout)
        except grpc.aio.AioRpcError as exc:
            # Not chained: grpc's error repeats ours; it is error.rpc_error.
            raise self._translate(exc, job_id) from None
        except asyncio.CancelledError:
            if self._closed:
                raise ClientClosed("the client was closed during the call") from None
            raise

    def _translate(self, exc: grpc.aio.AioRpcError, job_id: str = "") -> SetuError:
        if self._closed and exc.code() == grpc.StatusCode.CANCELLED:
            return ClientClosed("the client was closed during the call")
        error = from_rpc_error(exc)
        if isinstance(error, JobNotFound | JobNotStarted):
            error.job_id = job_id
        return error

    async def _retrying(
        self, call: Any, *args: Any, cap: float | None = None, budget: float | None = None
    ) -> Any:
        """One logical call, retried through transient failures within
        `budget` (RetryPolicy.budget_seconds unless given); `cap` bounds the
        delay (RetryPolicy.max_seconds unless given)."""
        retrying = AsyncRetrying(
            retry=retry_if_exception(
                lambda e: isinstance(e, SetuError) and e.code in _TRANSIENT and not self._closed
            ),
            wait=wait_random_exponential(
                multiplier=self.retry.initial_seconds, max=cap or self.retry.max_seconds
            ),
            stop=_LoopTimeBudget(budget or self.retry.budget_seconds),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await call(*args)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    # -- connections

    @cached_property
    def _connections(self) -> connections_pb2_grpc.ConnectionServiceStub:
        return connections_pb2_grpc.ConnectionServiceStub(self._short)

    async def create_connection(
        self,
        name: str,
        provider: str,
        config: Mapping[str, Any],
        placement: str = "cloud",
        agent_id: str | None = None,
        *,
        validate_only: bool = False,
    ) -> Connection:
        """A new connection. `placement` is "cloud" or "agent" (then `agent_id`
        names one of the workspace's agents). Config values may be secret
        references, {"$secret": "NAME"}: they are stored and returned as they
        are, and resolved only by the runtime that executes the connection.
        Raises InvalidArgument (config, placement), NotFound (agent) and
        AlreadyExists (name). With `validate_only` the server runs every
        check and answers the connection it would create, creating nothing."""
        request = _connection_request(name, provider, config, placement, agent_id)
        request.validate_only = validate_only
        answer: connections_pb2.Connection = await self._call(
            self._connections.CreateConnection, request
        )
        return answer

    async def get_connection(self, connection_id: str) -> Connection:
        request = connections_pb2.GetConnectionRequest(connection_id=connection_id)
        answer: connections_pb2.Connection = await self._retrying(
            self._call, self._connections.GetConnection, request
        )
        return answer

    async def list_connections(
        self, *, provider: str = "", page_size: int = 100
    ) -> AsyncIterator[Connection]:
        """Every connection of the workspace (of one provider, if given), by
        name, fetched a page at a time; an async iterator (`async for`)."""
        token = ""
        while True:
            request = connections_pb2.ListConnectionsRequest(
                provider=provider, page_size=page_size, page_token=token
            )
            page: connections_pb2.ListConnectionsResponse = await self._retrying(
                self._call, self._connections.ListConnections, request
            )
            for found in page.connections:
                yield found
            token = page.next_page_token
            if not token:
                return

    async def update_connection(
        self, connection_id: str, *, validate_only: bool = False, **fields: Any
    ) -> Connection:
        """Changes only the fields given: any of name, provider, config,
        placement ("cloud"/"agent") and agent_id. The result is validated as a
        whole, so moving to "agent" needs agent_id in the same call. With
        `validate_only` it answers the connection as it would be, changing nothing."""
        _check_fields("update_connection", fields, _CONNECTION_FIELDS)
        changes = connections_pb2.Connection(
            name=fields.get("name", ""),
            provider=fields.get("provider", ""),
            config=_struct(fields.get("config") or {}),
            placement=_placement(fields.get("placement", "cloud")),
            agent_id=fields.get("agent_id") or "",
        )
        request = connections_pb2.UpdateConnectionRequest(
            connection_id=connection_id,
            connection=changes,
            update_mask=field_mask_pb2.FieldMask(paths=list(fields)),
            validate_only=validate_only,
        )
        answer: connections_pb2.Connection = await self._retrying(
            self._call, self._connections.UpdateConnection, request
        )
        return answer

    async def delete_connection(self, connection_id: str) -> None:
        """Raises FailedPrecondition while a pipeline still uses it."""
        request = connections_pb2.DeleteConnectionRequest(connection_id=connection_id)
        await self._call(self._connections.DeleteConnection, request)

    async def test_connection(
        self, connection_id: str, timeout_seconds: int = 0
    ) -> TestConnectionResponse:
        """Whether the connection works from where it is placed; `ok` may be
        false with a message saying why. An agent-placed connection is tested
        by its agent, waiting up to `timeout_seconds` (0: the server's 30)."""
        request = connections_pb2.TestConnectionRequest(
            connection_id=connection_id, timeout_seconds=timeout_seconds
        )
        answer: TestConnectionResponse = await self._call(
            self._connections.TestConnection, request, timeout=_blocking(timeout_seconds)
        )
        return answer

    async def discover_streams(
        self, connection_id: str, timeout_seconds: int = 0
    ) -> DiscoverStreamsResponse:
        """The streams the connection offers; also refreshes its catalog."""
        request = connections_pb2.DiscoverStreamsRequest(
            connection_id=connection_id, timeout_seconds=timeout_seconds
        )
        answer: DiscoverStreamsResponse = await self._call(
            self._connections.DiscoverStreams, request, timeout=_blocking(timeout_seconds)
        )
        return answer

    async def preview_stream(
        self, connection_id: str, stream: str, limit: int = 0, timeout_seconds: int = 0
    ) -> PreviewStreamResponse:
        """The first `limit` rows of one stream (0: the server's 20)."""
        request = connections_pb2.PreviewStreamRequest(
            connection_id=connection_id,
            stream=stream,
            limit=limit,
            timeout_seconds=timeout_seconds,
        )
        answer: PreviewStreamResponse = await self._call(
            self._connections.PreviewStream, request, timeout=_blocking(timeout_seconds)
        )
        return answer

    # -- agents

    @cached_property
    def _agents(self) -> agents_pb2_grpc.AgentDirectoryServiceStub:
        return agents_pb2_grpc.AgentDirectoryServiceStub(self._short)

    async def list_agents(self, *, page_size: int = 100) -> AsyncIterator[Agent]:
        """Every agent of the workspace, by name, with its presence (`online`,
        `last_seen_at`, `signed_off_at`) and the tasks it holds now; an async
        iterator: `async for agent in client.list_agents()`."""
        token = ""
        while True:
            request = agents_pb2.ListWorkspaceAgentsRequest(page_size=page_size, page_token=token)
            page: agents_pb2.ListWorkspaceAgentsResponse = await self._retrying(
                self._call, self._agents.ListWorkspaceAgents, request
            )
            for found in page.agents:
                yield agent_from_message(found)
            token = page.next_page_token
            if not token:
                return

    # -- pipelines

    @cached_property
    def _pipelines(self) -> pipelines_pb2_grpc.PipelineServiceStub:
        return pipelines_pb2_grpc.PipelineServiceStub(self._short)

    async def create_pipeline(
        self,
        name: str,
        source_connection_id: str,
        destination_connection_id: str,
        streams: Sequence[str] = (),
        spec: Mapping[str, Any] | None = None,
        write_mode: str = "append",
        schedule: str = "",
        paused: bool = False,
        *,
        validate_only: bool = False,
        new_source: Mapping[str, Any] | None = None,
        new_destination: Mapping[str, Any] | None = None,
    ) -> Pipeline:
        """A new pipeline. `streams` empty means all the source offers; `spec`
        is {"operators": [...]}; `write_mode` is append, overwrite, upsert or
        merge; `schedule` a five-field cron expression in UTC ("" for manual
        runs only). Raises InvalidArgument, NotFound (a connection) and
        AlreadyExists (name).

        With `validate_only` the server runs every check and answers the
        pipeline it would create, creating nothing. Then `new_source` or
        `new_destination` (create_connection's arguments by name) may stand
        in for a connection not made yet; pass "" as its id."""
        request = pipelines_pb2.CreatePipelineRequest(
            name=name,
            source_connection_id=source_connection_id,
            destination_connection_id=destination_connection_id,
            streams=list(streams),
            spec=_struct(spec or {}),
            write_mode=_write_mode(write_mode),
            schedule=schedule,
            paused=paused,
            validate_only=validate_only,
        )
        _stand_ins(request, new_source, new_destination)
        answer: pipelines_pb2.Pipeline = await self._call(self._pipelines.CreatePipeline, request)
        return answer

    async def get_pipeline(self, pipeline_id: str) -> Pipeline:
        request = pipelines_pb2.GetPipelineRequest(pipeline_id=pipeline_id)
        answer: pipelines_pb2.Pipeline = await self._retrying(
            self._call, self._pipelines.GetPipeline, request
        )
        return answer

    async def list_pipelines(self, *, page_size: int = 100) -> AsyncIterator[Pipeline]:
        """Every pipeline of the workspace, by name, fetched a page at a time;
        an async iterator: `async for p in client.list_pipelines()`."""
        token = ""
        while True:
            request = pipelines_pb2.ListPipelinesRequest(page_size=page_size, page_token=token)
            page: pipelines_pb2.ListPipelinesResponse = await self._retrying(
                self._call, self._pipelines.ListPipelines, request
            )
            for found in page.pipelines:
                yield found
            token = page.next_page_token
            if not token:
                return

    async def update_pipeline(
        self,
        pipeline_id: str,
        *,
        validate_only: bool = False,
        new_source: Mapping[str, Any] | None = None,
        new_destination: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> Pipeline:
        """Changes only the fields given: any of name, source_connection_id,
        destination_connection_id, streams, spec, write_mode, schedule and
        paused. Changing the schedule or pausing recomputes next_run_at.
        `validate_only`, `new_source` and `new_destination` as for
        create_pipeline (name the stand-in's id field, as "")."""
        _check_fields("update_pipeline", fields, _PIPELINE_FIELDS)
        changes = pipelines_pb2.Pipeline(
            name=fields.get("name", ""),
            source_connection_id=fields.get("source_connection_id", ""),
            destination_connection_id=fields.get("destination_connection_id", ""),
            streams=list(fields.get("streams", ())),
            spec=_struct(fields.get("spec") or {}),
            write_mode=_write_mode(fields.get("write_mode", "append")),
            schedule=fields.get("schedule", ""),
            paused=fields.get("paused", False),
        )
        request = pipelines_pb2.UpdatePipelineRequest(
            pipeline_id=pipeline_id,
            pipeline=changes,
            update_mask=field_mask_pb2.FieldMask(paths=list(fields)),
            validate_only=validate_only,
        )
        _stand_ins(request, new_source, new_destination)
        answer: pipelines_pb2.Pipeline = await self._retrying(
            self._call, self._pipelines.UpdatePipeline, request
        )
        return answer

    async def _pipeline_named(self, name: str) -> Pipeline:
        async for found in self.list_pipelines():
            if found.name == name:
                return found
        raise NotFound(f"no pipeline named {name!r}")

    async def get_pipeline_state(self, pipeline_id: str) -> PipelineState:
        """The saved cursor of each incremental stream of the pipeline (a
        stream without one is read in full by its next run)."""
        request = pipelines_pb2.GetPipelineStateRequest(pipeline_id=pipeline_id)
        answer: PipelineState = await self._retrying(
            self._call, self._pipelines.GetPipelineState, request
        )
        return answer

    async def reset_pipeline_state(self, pipeline_id: str, stream: str = "") -> list[str]:
        """Forgets the saved cursor of `stream` (every stream when empty): the
        next run reads it in full. Returns the streams reset; NotFound when
        the named stream has no saved state."""
        request = pipelines_pb2.ResetPipelineStateRequest(pipeline_id=pipeline_id, stream=stream)
        answer: pipelines_pb2.ResetPipelineStateResponse = await self._call(
            self._pipelines.ResetPipelineState, request
        )
        return list(answer.streams)

    async def delete_pipeline(self, pipeline_id: str) -> None:
        """Its runs remain. Raises FailedPrecondition while a run is active."""
        request = pipelines_pb2.DeletePipelineRequest(pipeline_id=pipeline_id)
        await self._call(self._pipelines.DeletePipeline, request)

    async def submit_run(
        self,
        pipeline: str,
        start: bool = True,
        dry_run: bool = False,
        idempotency_key: str = "",
        *,
        rerun_of: str = "",
    ) -> Job:
        """A new run of the pipeline, given by its id or its name: PENDING, or
        READY for start_job when `start` is false. The job's `id` is what
        wait_for_job, watch_job and job_outputs take. With an
        `idempotency_key`, a repeated submit answers the first job, so only
        then is the call retried. `rerun_of` names the run this one repeats
        (rerun_job). Raises NotFound for an unknown pipeline."""
        pipeline_id = pipeline if _is_uuid(pipeline) else (await self._pipeline_named(pipeline)).id
        request = jobs_pb2.SubmitRunRequest(
            pipeline_id=pipeline_id,
            start=start,
            dry_run=dry_run,
            idempotency_key=idempotency_key,
            rerun_of=rerun_of,
        )
        if idempotency_key:
            answer: jobs_pb2.SubmitRunResponse = await self._retrying(
                self._call, self._stub.SubmitRun, request
            )
        else:
            answer = await self._call(self._stub.SubmitRun, request)
        return job_from_message(answer.job)

    async def rerun_job(self, job_id: str, *, start: bool = True) -> Job:
        """A new run of the pipeline that run `job_id` ran, a dry run if it
        was one; its first event says `rerun of job <job_id>`. Raises
        JobNotFound, and FailedPrecondition when the job is a connection's
        test, discover or preview (no run to repeat) or its pipeline was
        deleted."""
        old = await self.get_job(job_id)
        if old.kind is not JobKind.RUN:
            raise FailedPrecondition(
                f"job {job_id} is a {old.kind.name.lower()} of a connection, not a run: "
                "there is no run to repeat"
            )
        if not old.pipeline_id:
            raise FailedPrecondition(
                f"job {job_id} ran a pipeline that has since been deleted: there is nothing "
                "to run again"
            )
        return await self.submit_run(
            old.pipeline_id, start=start, dry_run=old.dry_run, rerun_of=job_id
        )


_CONNECTION_FIELDS = ("name", "provider", "config", "placement", "agent_id")
_PIPELINE_FIELDS = (
    "name",
    "source_connection_id",
    "destination_connection_id",
    "streams",
    "spec",
    "write_mode",
    "schedule",
    "paused",
)
_PLACEMENTS = {"cloud": common_pb2.PLACEMENT_CLOUD, "agent": common_pb2.PLACEMENT_AGENT}
_WRITE_MODES = {
    "append": common_pb2.WRITE_MODE_APPEND,
    "overwrite": common_pb2.WRITE_MODE_OVERWRITE,
    "upsert": common_pb2.WRITE_MODE_UPSERT,
    "merge": common_pb2.WRITE_MODE_MERGE,
}
# Connection operations may block for an agent's answer: the server's
# default wait when none is given, plus room for the answer to travel.
_DEFAULT_BLOCKING_SECONDS = 30


def _blocking(timeout_seconds: int) -> float:
    return (timeout_seconds or _DEFAULT_BLOCKING_SECONDS) + LONG_POLL_MARGIN_SECONDS


def _closing(trailers: Any) -> bool:
    """Whether a call's trailing metadata says its server is shutting down."""
    return any(key == CLOSING_KEY for key, _ in trailers or ())


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _connection_request(
    name: str, provider: str, config: Mapping[str, Any], placement: str, agent_id: str | None
) -> connections_pb2.CreateConnectionRequest:
    return connections_pb2.CreateConnectionRequest(
        name=name,
        provider=provider,
        config=_struct(config),
        placement=_placement(placement),
        agent_id=agent_id or "",
    )


def _stand_ins(
    request: pipelines_pb2.CreatePipelineRequest | pipelines_pb2.UpdatePipelineRequest,
    source: Mapping[str, Any] | None,
    destination: Mapping[str, Any] | None,
) -> None:
    """A validate_only request's connections not made yet (create_connection's
    arguments by name)."""
    for wanted, target in (
        (source, request.new_source_connection),
        (destination, request.new_destination_connection),
    ):
        if wanted is not None:
            target.CopyFrom(
                _connection_request(
                    str(wanted["name"]),
                    str(wanted["provider"]),
                    wanted.get("config") or {},
                    str(wanted.get("placement") or "cloud"),
                    wanted.get("agent_id") or None,
                )
            )


def _struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(values)
    return message


def _wire(enum: Any, value: int) -> Any:
    """A public enum member as the generated enum's value (the same number)."""
    return enum.Value(enum.Name(value))


def _placement(name: str) -> common_pb2.Placement.ValueType:
    try:
        return _PLACEMENTS[name]
    except KeyError:
        raise ValueError(
            f"placement must be one of {', '.join(_PLACEMENTS)}, not {name!r}"
        ) from None


def _write_mode(name: str) -> common_pb2.WriteMode.ValueType:
    try:
        return _WRITE_MODES[name]
    except KeyError:
        raise ValueError(
            f"write_mode must be one of {', '.join(_WRITE_MODES)}, not {name!r}"
        ) from None


def _check_fields(method: str, fields: Mapping[str, Any], allowed: Sequence[str]) -> None:
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise TypeError(
            f"{method}() cannot change {', '.join(unknown)}; it takes {', '.join(allowed)}"
        )
