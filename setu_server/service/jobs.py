"""Jobs as clients see them: read, wait, watch, start, cancel, list."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Protocol, TypeVar
from uuid import UUID

from setu_client.clock import Clock
from setu_client.errors import FailedPrecondition, JobNotFound, JobNotStarted, ServerClosing
from setu_server.hooks import Hooks
from setu_server.models import (
    EventLevel,
    Job,
    JobEvent,
    JobFilter,
    JobKind,
    JobOutput,
    JobState,
)
from setu_server.service import naming, paging
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.watch import CLOCK_SLACK, Answers, Watch, WatchHub
from setu_server.store import jobs, tasks
from setu_server.store.db import Database, Executor, transaction

T = TypeVar("T")

SHUTTING_DOWN = "this server is shutting down: try again shortly"


class Dispatcher(Protocol):
    """Creates the tasks that carry a job out, once it is PENDING."""

    async def dispatch(self, db: Executor, job: Job) -> None: ...


class NoDispatch:
    async def dispatch(self, db: Executor, job: Job) -> None:
        return None


class JobService:
    def __init__(
        self,
        pool: Database,
        clock: Clock,
        hub: WatchHub,
        lifecycle: JobLifecycle,
        dispatcher: Dispatcher | None = None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._hub = hub
        self._lifecycle = lifecycle
        self._dispatcher = dispatcher or NoDispatch()
        # Points inside WaitJob and WatchJob where tests force an
        # interleaving or learn that a call is parked (the job id).
        self.hooks: Hooks[UUID] = Hooks("after_subscribe", "after_read", "watching")
        self.answers = Answers()

    async def get(self, workspace_id: UUID, job_id: UUID) -> Job:
        """The job as people read it: its agents named (service/naming.py)."""
        return await self._named(await self._find(workspace_id, job_id))

    async def _find(self, workspace_id: UUID, job_id: UUID) -> Job:
        job = await jobs.get_job(self._pool, job_id, workspace_id)
        if job is None:
            raise JobNotFound(f"job {job_id} not found")
        return job

    async def _named(self, job: Job, db: Executor | None = None) -> Job:
        (named,) = await naming.named_jobs(db or self._pool, job.workspace_id, [job])
        return named

    async def wait(self, workspace_id: UUID, job_id: UUID, max_wait: float) -> Job:
        """The job once terminal, or as it is after `max_wait` seconds.

        Subscribe first, then read: a transition that lands between the two
        is in the watch by the time we wait on it.
        """
        self._refuse_if_closing()
        with self._hub.subscribe(job_id) as watch:
            await self.hooks.after_subscribe(job_id)
            job = await self._find(workspace_id, job_id)
            if job.state is JobState.READY:
                raise JobNotStarted(f"job {job_id} is READY: start it with StartJob first")
            watch.offer(job)
            await self.hooks.after_read(job_id)
            if job.state.terminal:
                return await self._named_once(watch, job)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + max(max_wait, 0.0)
            latest = watch.latest or job
            while not latest.state.terminal and not self._hub.closing.is_set():
                remaining = deadline - loop.time()
                if remaining < CLOCK_SLACK:
                    break
                latest = await watch.newer_than(latest.version, remaining, self._hub.closing)
            return await self._named_once(watch, latest)

    async def _named_once(self, watch: Watch, job: Job) -> Job:
        """`job` named, once for all the waiters of its watch answered with
        its version: a storm answers every waiter of a job at once."""
        named = watch.named(job.version)
        if named is None:
            named = watch.keep_named(await self._named(job))
        return named

    def answer(self, job: Job, build: Callable[[Job], T]) -> T:
        """`build(job)`, once for every waiter answered with this same `job`
        (`wait` hands them one object per version): see `Answers`."""
        return self.answers.of(job, build)

    async def watch(
        self, workspace_id: UUID, job_id: UUID, from_version: int, max_wait: float | None = None
    ) -> AsyncIterator[Job]:
        """Snapshots newer than `from_version`, latest first when the reader
        lags; ends after the terminal one (or at once if the caller has it),
        or once `max_wait` seconds (None: no bound) have passed."""
        self._refuse_if_closing()
        with self._hub.subscribe(job_id) as watch:
            job = await self._find(workspace_id, job_id)
            watch.offer(job)
            await self.hooks.watching(job_id)
            loop = asyncio.get_running_loop()
            deadline = None if max_wait is None else loop.time() + max(max_wait, 0.0)
            sent = from_version
            latest = watch.latest or job
            # The agents a watch names change rarely (a stage's runtime, a
            # message): looked up again only when they do.
            names, named_for = naming.NO_AGENTS, set[UUID]()
            while True:
                if latest.version > sent:
                    agents = naming.job_agents([latest])
                    if agents - named_for:
                        names = await naming.names_for(self._pool, workspace_id, agents)
                        named_for = agents
                    yield names.job(latest) if agents else latest
                    sent = latest.version
                if latest.state.terminal or self._hub.closing.is_set():
                    return
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining < CLOCK_SLACK:
                    return
                latest = await watch.newer_than(sent, remaining, self._hub.closing)

    def _refuse_if_closing(self) -> None:
        # Parked calls answered at once when the hub closed; a new one would
        # too, and the SDK would re-issue it at once, over and over. Refused,
        # the SDK moves to another address of its target, or backs off until
        # this server is back.
        if self._hub.closing.is_set():
            raise ServerClosing(SHUTTING_DOWN)

    async def start(self, workspace_id: UUID, job_id: UUID) -> Job:
        found = await self._find(workspace_id, job_id)
        orphan = found.kind is JobKind.RUN and found.pipeline_id is None
        if orphan and found.state is JobState.READY:
            # Deleting a pipeline cancels its READY runs; one left from before
            # that rule could never run.
            raise FailedPrecondition(f"run {job_id}: its pipeline was deleted; nothing to start")
        async with transaction(self._pool) as conn:
            job = await self._lifecycle.transition(
                job_id,
                JobState.PENDING,
                "Started",
                db=conn,
                only_from=frozenset({JobState.READY}),
            )
            await self._dispatcher.dispatch(conn, job)
        self._lifecycle.published([job])
        return await self.get(workspace_id, job_id)

    async def cancel(self, workspace_id: UUID, job_id: UUID, reason: str) -> Job:
        """Idempotent. Nothing executing: cancelled now. Otherwise the runtime
        is asked to stop and ends the job itself."""
        now = self._clock.sql_now()
        async with transaction(self._pool) as conn:
            job = await jobs.lock_job(conn, job_id, workspace_id)
            if job is None:
                raise JobNotFound(f"job {job_id} not found")
            if job.state.terminal:
                return await self._named(job, conn)
            why = f"cancelled: {reason}" if reason else "cancelled by request"
            if await tasks.count_leased_tasks(conn, job_id) == 0:
                await tasks.cancel_pending_tasks(conn, job_id, now)
                changed = await self._lifecycle.transition(
                    job_id, JobState.CANCELLED, why[0].upper() + why[1:], db=conn, error_message=why
                )
            else:
                # What has not started never will; what runs stops cooperatively.
                await tasks.cancel_pending_tasks(conn, job_id, now)
                requested = await jobs.request_job_cancel(conn, job_id, why, now)
                if requested is None:
                    return await self._named(job, conn)
                await jobs.insert_job_event(
                    conn,
                    job_id,
                    "Cancel requested; waiting for the runtime to stop",
                    now=now,
                    level=EventLevel.WARNING,
                )
                changed = requested
        self._lifecycle.published([changed])
        return await self._named(changed)

    async def list_jobs(
        self, workspace_id: UUID, where: JobFilter, page_size: int, page_token: str
    ) -> tuple[list[Job], str]:
        query = listing_query(workspace_id, where)
        position = paging.decode(page_token, query)
        after = None
        if position is not None:
            after = (datetime.fromisoformat(position["created_at"]), UUID(position["id"]))
        size = page_size or 50
        found = await jobs.list_jobs(self._pool, workspace_id, where, after=after, limit=size + 1)
        page, more = found[:size], len(found) > size
        token = ""
        if more:
            last = page[-1]
            token = paging.encode(
                {"created_at": last.created_at.isoformat(), "id": str(last.id)}, query
            )
        return await naming.named_jobs(self._pool, workspace_id, page), token

    async def events(
        self, workspace_id: UUID, job_id: UUID, after: int, page_size: int, page_token: str
    ) -> tuple[list[JobEvent], str]:
        await self._find(workspace_id, job_id)
        query = repr((job_id, after))
        position = paging.decode(page_token, query)
        start = int(position["sequence"]) if position else after
        size = page_size or 100
        found = await jobs.list_job_events(self._pool, job_id, after=start, limit=size + 1)
        page, more = found[:size], len(found) > size
        token = paging.encode({"sequence": page[-1].sequence}, query) if more else ""
        return await naming.named_events(self._pool, workspace_id, page), token

    async def outputs(self, workspace_id: UUID, job_id: UUID) -> tuple[Job, list[JobOutput]]:
        """The job and its per-stream counts, the streams still moving included."""
        job = await self.get(workspace_id, job_id)
        return job, live_outputs(job, await jobs.job_outputs(self._pool, job_id))


def live_outputs(job: Job, outputs: list[JobOutput]) -> list[JobOutput]:
    """A run's per-stream counts: what job_output holds (a stream staged or
    loaded), with what the runtimes last reported of each stream still
    moving (job.stream_progress) where that is further, and the streams
    that have only moved so far, in stream order. Once a run ended, a load
    that did not commit counts nothing loaded (it rolled back)."""
    by_stream = {o.stream: o for o in outputs}
    for stream, (extracted, loaded) in job.stream_progress.items():
        if job.state.terminal:
            loaded = 0
        known = by_stream.get(stream)
        if known is None:
            by_stream[stream] = JobOutput(stream, extracted, loaded, "", False)
        elif not known.loaded:
            by_stream[stream] = dataclasses.replace(
                known,
                rows_extracted=max(known.rows_extracted, extracted),
                rows_loaded=max(known.rows_loaded, loaded),
            )
    return [by_stream[s] for s in sorted(by_stream)]


def listing_query(workspace_id: UUID, where: JobFilter) -> str:
    """The listing a page token is bound to, spelled alike in every process:
    a frozenset's order follows string hashes, which differ from process to
    process, so a token of a list of several kinds or states made by one
    replica would read as "issued for different filters" on another."""
    spelled = [
        sorted(str(v) for v in value) if isinstance(value, frozenset) else value
        for value in (getattr(where, f.name) for f in dataclasses.fields(where))
    ]
    return repr((workspace_id, spelled))
