"""SetuClient: the Python SDK for clients of Setu.

Short calls share one channel; long-polls (`wait_for_job`, `watch_job`) travel
on their own small pool of channels, so hundreds of parked waits never queue
behind or starve short calls. Every channel pings the server (HTTP/2
keepalive) so a silently dead peer is noticed.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    wait_random_exponential,
)
from tenacity.stop import stop_base

from setu_client._proto.setu.v1 import common_pb2, jobs_pb2, jobs_pb2_grpc
from setu_client.channel import open_channel
from setu_client.errors import (
    ClientClosed,
    DeadlineExceeded,
    FailedPrecondition,
    JobNotFound,
    JobNotStarted,
    NotFound,
    SetuError,
    Unavailable,
    from_rpc_error,
)

T = TypeVar("T")

# The server's WaitJob cap (DESIGN §4); the SDK's per-call timeout sits above it.
SERVER_WAIT_CAP_SECONDS = 60.0
LONG_POLL_MARGIN_SECONDS = 15.0

TERMINAL_STATES = frozenset(
    {common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELLED}
)

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
    """Jittered exponential backoff for transient failures.

    `budget_seconds` bounds a run of consecutive failures, not the whole
    wait: every good answer starts a fresh budget.
    """

    initial_seconds: float = 0.1
    max_seconds: float = 10.0
    budget_seconds: float = 300.0


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


class SetuClient:
    """An asyncio client for JobOrchestrationService.

    Use as `async with SetuClient(target, api_key) as client: ...`, or call
    `close()`. Errors are the classes of `setu_client.errors`.
    """

    def __init__(
        self,
        target: str,
        api_key: str,
        *,
        tls: bool = False,
        root_certificates: bytes | None = None,
        retry: RetryPolicy | None = None,
        long_poll_channels: int = 2,
        call_timeout: float = 30.0,
        wait_cap_seconds: float = SERVER_WAIT_CAP_SECONDS,
    ) -> None:
        if long_poll_channels < 1:
            raise ValueError("long_poll_channels must be at least 1")
        self.retry = retry or RetryPolicy()
        self._call_timeout = call_timeout
        self._long_poll_timeout = wait_cap_seconds + LONG_POLL_MARGIN_SECONDS

        def channel() -> grpc.aio.Channel:
            return open_channel(target, api_key, tls=tls, root_certificates=root_certificates)

        self._short = channel()
        # Distinct channel args keep grpc from sharing one connection between them.
        self._long = [
            open_channel(
                target,
                api_key,
                tls=tls,
                root_certificates=root_certificates,
                options=[("grpc.channel_pool_index", i)],
            )
            for i in range(long_poll_channels)
        ]
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
        for channel in (self._short, *self._long):
            await channel.close(grace=None)

    # -- short calls

    async def get_job(self, job_id: str) -> common_pb2.Job:
        request = jobs_pb2.GetJobRequest(job_id=job_id)
        answer: jobs_pb2.GetJobResponse = await self._retrying(
            self._call, self._stub.GetJob, request
        )
        return answer.job

    async def start_job(self, job_id: str) -> common_pb2.Job:
        request = jobs_pb2.StartJobRequest(job_id=job_id)
        answer: jobs_pb2.StartJobResponse = await self._call(self._stub.StartJob, request)
        return answer.job

    async def cancel_job(self, job_id: str, reason: str = "") -> common_pb2.Job:
        """Idempotent: cancelling an ended job returns it unchanged."""
        request = jobs_pb2.CancelJobRequest(job_id=job_id, reason=reason)
        answer: jobs_pb2.CancelJobResponse = await self._retrying(
            self._call, self._stub.CancelJob, request
        )
        return answer.job

    async def list_jobs(
        self,
        *,
        states: Sequence[common_pb2.JobState.ValueType] = (),
        kinds: Sequence[common_pb2.JobKind.ValueType] = (),
        pipeline_id: str = "",
        page_size: int = 100,
    ) -> AsyncIterator[common_pb2.Job]:
        """Every matching job, newest first, fetched a page at a time."""
        token = ""
        while True:
            request = jobs_pb2.ListJobsRequest(
                states=states,
                kinds=kinds,
                pipeline_id=pipeline_id,
                page_size=page_size,
                page_token=token,
            )
            page = await self._call(self._stub.ListJobs, request)
            for job in page.jobs:
                yield job
            token = page.next_page_token
            if not token:
                return

    async def job_events(
        self, job_id: str, *, after_sequence: int = 0
    ) -> AsyncIterator[common_pb2.JobEvent]:
        """The job's timeline, oldest first."""
        token = ""
        while True:
            request = jobs_pb2.ListJobEventsRequest(
                job_id=job_id, after_sequence=after_sequence, page_size=500, page_token=token
            )
            page = await self._call(self._stub.ListJobEvents, request)
            for event in page.events:
                yield event
            token = page.next_page_token
            if not token:
                return

    async def job_outputs(self, job_id: str) -> jobs_pb2.GetJobOutputsResponse:
        request = jobs_pb2.GetJobOutputsRequest(job_id=job_id)
        answer: jobs_pb2.GetJobOutputsResponse = await self._call(self._stub.GetJobOutputs, request)
        return answer

    # -- long polls

    async def wait_for_job(
        self, job_id: str, timeout: float | None = None
    ) -> jobs_pb2.WaitJobResponse:
        """Block until the job is terminal; returns its state, error and version.

        No overall deadline unless `timeout` (seconds) is given, then
        TimeoutError. Raises JobNotStarted for a READY job and JobNotFound
        for an unknown one; transient failures are retried (see RetryPolicy).
        """
        async with asyncio.timeout(timeout):
            while True:
                answer: jobs_pb2.WaitJobResponse = await self._retrying(self._wait_once, job_id)
                if answer.terminal:
                    return answer

    async def _wait_once(self, job_id: str) -> jobs_pb2.WaitJobResponse:
        stub = self._long_stubs[next(self._next_long)]
        try:
            answer: jobs_pb2.WaitJobResponse = await self._call(
                stub.WaitJob,
                jobs_pb2.WaitJobRequest(job_id=job_id),
                timeout=self._long_poll_timeout,
            )
        except NotFound as exc:
            raise JobNotFound(exc.message) from exc
        except JobNotStarted:
            raise
        except FailedPrecondition as exc:
            raise JobNotStarted(exc.message) from exc
        return answer

    async def watch_job(self, job_id: str, from_version: int = 0) -> AsyncIterator[common_pb2.Job]:
        """Snapshots of the job as it changes, ending after the terminal one.

        A dropped stream resumes from the last version seen, so no snapshot
        is repeated and the terminal one is never skipped.
        """
        seen = from_version
        while True:
            stream = self._long_stubs[next(self._next_long)].WatchJob(
                jobs_pb2.WatchJobRequest(job_id=job_id, from_version=seen)
            )
            try:
                async for answer in stream:
                    seen = answer.job.version
                    yield answer.job
                    if answer.job.state in TERMINAL_STATES:
                        return
                return
            except grpc.aio.AioRpcError as exc:
                error = self._translate(exc)
                if not isinstance(error, Unavailable | DeadlineExceeded):
                    raise error from exc
                await asyncio.sleep(self.retry.initial_seconds)
            finally:
                stream.cancel()

    # -- plumbing

    async def _call(self, method: Any, request: Any, *, timeout: float | None = None) -> Any:
        if self._closed:
            raise ClientClosed("the client is closed")
        try:
            return await method(request, timeout=timeout or self._call_timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._translate(exc) from exc
        except asyncio.CancelledError:
            if self._closed:
                raise ClientClosed("the client was closed during the call") from None
            raise

    def _translate(self, exc: grpc.aio.AioRpcError) -> SetuError:
        if self._closed and exc.code() == grpc.StatusCode.CANCELLED:
            return ClientClosed("the client was closed during the call")
        return from_rpc_error(exc)

    async def _retrying(self, call: Any, *args: Any) -> Any:
        """One logical call, retried through transient failures within the budget."""
        retrying = AsyncRetrying(
            retry=retry_if_exception(
                lambda e: isinstance(e, SetuError) and e.code in _TRANSIENT and not self._closed
            ),
            wait=wait_random_exponential(
                multiplier=self.retry.initial_seconds, max=self.retry.max_seconds
            ),
            stop=_LoopTimeBudget(self.retry.budget_seconds),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await call(*args)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover
