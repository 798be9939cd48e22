"""The runtime loop: N slots, each running one task at a time through the
handler for its kind while heartbeating at a third of the lease, then
reporting how it ended.

- One leasing call at a time (a long-poll) asks for as many tasks as there
  are free slots (LeaseTask's max_tasks), and a completion asks for the
  slot's next task in its answer (CompleteTask's lease_next), so a busy
  runtime pays one round trip per task.

- A lost lease (the server answers LeaseLost) stops the task: another runtime
  may hold it now, so nothing is reported.
- A requested cancel is passed to the handler, which stops at its next batch.
- Transient errors (server down, network) back off exponentially with jitter,
  capped, and forever; the backoff resets after each good answer. While the
  server answers that its own database is unreachable, the pauses stay
  short (DATABASE_PAUSE_SECONDS), so work resumes as it returns. Any other
  error backs off too, logged with its traceback: no error ends a slot, and
  `live_slots` counts the slots at work.
- A drain is not a failure: stop() leases nothing more (a task leased
  while it began is handed back unstarted), lets running tasks finish within
  a grace period, and hands back the rest (ReleaseTask: pending again at
  once elsewhere, no attempt spent, the job told where the task stood).
- An outage is not one either: a task whose database went away for a
  moment (an error with `outage = True`, setu_engine/errors.py) is
  handed back for a retry after a backoff without spending an attempt, as
  long as the server grants free retries. A database refusing the first
  connect (the error's `lost` False) is one only while the task is in an
  outage streak (`free_retries` above 0); otherwise it spends an attempt.
- A report already in flight (a completion, a failure or a hand-back) is
  not cut short at the grace: it has a second, bounded wait of its own
  (`report_grace_seconds`), since cut off it might land or not. Past that
  (the server unreachable, say), stop() gives the task up: nothing more is
  sent for it, its heartbeats stop, and its lease runs out, so the reaper
  requeues it for another runtime, unless the report did land and the task
  stands completed. So stop() returns within both graces plus
  a hand-back's call. As it begins it signs off (when given `sign_off`), so
  the server counts the runtime offline at once and refuses new runs for
  it rather than queue them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn

from tenacity import AsyncRetrying, RetryCallState, wait_random_exponential

from setu_agent.runtime.task import (
    Handler,
    NonRetryable,
    TaskCancelled,
    TaskContext,
    TaskSource,
    describe,
)
from setu_client.diagnose import Outage
from setu_client.errors import (
    Cancelled,
    DatabaseUnavailable,
    DeadlineExceeded,
    LeaseLost,
    ResourceExhausted,
    Unavailable,
)
from setu_tasks.results import MalformedResult, TaskResult, check_result, redacted
from setu_tasks.specs import LeasedTask

log = logging.getLogger("setu.runtime")

TRANSIENT = (Unavailable, DeadlineExceeded, ResourceExhausted, Cancelled)
# The share of the lease TTL a task may run on without a confirmed
# heartbeat: it stops with this much of the TTL to spare.
LEASE_MARGIN = 1 / 6
# While rows move (TaskContext.beat_soon), a heartbeat at least this often,
# so a run's counts stay live; when nothing moves, only the lease's cadence.
PROGRESS_SECONDS = 2.0
# On stop, how long a completion report in flight when the task grace ends
# may still take (retrying a server that does not answer) before the task is
# given up to its lease's expiry. Short: a supervisor's kill deadline (say,
# Kubernetes' terminationGracePeriodSeconds) should cover both graces.
REPORT_GRACE_SECONDS = 10.0
# The longest pause between attempts while the server answers that its
# database is unreachable (DatabaseUnavailable): a run submitted as the
# database returns starts within about this much.
DATABASE_PAUSE_SECONDS = 1.0


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, TRANSIENT)


def backoff(
    max_seconds: float = 30.0,
    who: str = "runtime",
    *,
    retry_on: Callable[[BaseException], bool] = is_transient,
    server_outage: Outage | None = None,
) -> AsyncRetrying:
    """Retry transient failures (or whatever retry_on accepts) forever:
    exponential with full jitter, capped. A fresh one per call, so the delay
    starts small again after a success. `server_outage` hears every attempt: it
    names a failure's address and cause once, and says when the server
    answers again (setu_client/diagnose.py)."""
    heard = server_outage or Outage("setu-server")

    def retry(state: RetryCallState) -> bool:
        error = state.outcome.exception() if state.outcome else None
        if error is None or (isinstance(error, Exception) and not unreached(error, heard)):
            # An answer came from the server, even a refusal: it is reached.
            heard.reached(who=who)
        return error is not None and retry_on(error)

    return AsyncRetrying(
        retry=retry,
        wait=_pause(max_seconds),
        before_sleep=lambda state: _log_backoff(who, state, heard),
        reraise=True,
    )


def _pause(max_seconds: float) -> Callable[[RetryCallState], float]:
    """Exponential with full jitter up to `max_seconds`; while the server
    says its own database is what fails, never above DATABASE_PAUSE_SECONDS:
    that outage ends the moment the database answers, and a runtime sleeping
    out a long backoff then would leave runs waiting for nothing."""
    grow = wait_random_exponential(multiplier=0.5, max=max_seconds)

    def pause(state: RetryCallState) -> float:
        seconds = float(grow(state))
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, DatabaseUnavailable):
            return min(seconds, DATABASE_PAUSE_SECONDS)
        return seconds

    return pause


def unreached(error: BaseException, outage: Outage) -> bool:
    """Whether `error` says the server was not reached: a transient status,
    or a proxy's or a transport's failure that grpc reports as another code
    (a proxy's HTTP 500 arrives as UNKNOWN)."""
    return is_transient(error) or outage.cause(error) is not None


def _log_backoff(who: str, state: RetryCallState, outage: Outage) -> None:
    error = state.outcome.exception() if state.outcome else None
    if error is None or unreached(error, outage):
        # At WARNING once per outage (and per new cause), naming the address.
        outage.failed(error or Unavailable(""), who=who, attempt=state.attempt_number)
    else:
        # Not a network blip (INTERNAL, UNKNOWN, a bug): loud, with its
        # traceback, but the slot goes on (a dead slot would idle silently).
        log.error(
            "unexpected error; backing off",
            exc_info=error,
            extra={"who": who, "attempt": state.attempt_number},
        )


def _any_error(exc: BaseException) -> bool:
    return isinstance(exc, Exception)


class Runtime:
    def __init__(
        self,
        source: TaskSource,
        handlers: Mapping[str, Handler],
        *,
        name: str,
        concurrency: int = 4,
        lease_ttl_seconds: float = 60.0,
        lease_wait_seconds: float = 30.0,
        max_backoff_seconds: float = 30.0,
        sign_off: Callable[[str], Awaitable[None]] | None = None,
        report_grace_seconds: float = REPORT_GRACE_SECONDS,
        server_outage: Outage | None = None,
    ) -> None:
        self._source = source
        # Every call's failures and answers, for the log of an outage.
        self.server_outage = server_outage or Outage("setu-server")
        self._report_grace = report_grace_seconds
        # Set by stop() once the report grace is spent: reports still in
        # flight are abandoned, their tasks left to their leases' expiry.
        self._abandon = asyncio.Event()
        self._sign_off = sign_off
        self._handlers = dict(handlers)
        self.name = name
        self._concurrency = concurrency
        self._ttl = lease_ttl_seconds
        self._wait = lease_wait_seconds
        self._max_backoff = max_backoff_seconds
        self._stopping = asyncio.Event()
        self._slots: list[asyncio.Task[None]] = []
        self._running: dict[str, asyncio.Task[None]] = {}
        # Leased, waiting for a free slot; slots waiting for a task; the
        # leasing loop waits for `_wanted` when every slot is served.
        self._ready: asyncio.Queue[LeasedTask] = asyncio.Queue()
        self._idle = 0
        self._wanted = asyncio.Event()
        self._leasing: asyncio.Task[None] | None = None
        # A completion's eager lease, by the completed task's id, until its
        # slot takes it.
        self._eager: dict[str, LeasedTask] = {}
        # Slots still working (each logs when it starts and ends): below
        # `concurrency` while not stopping means one died.
        self.live_slots = 0
        # Observability: tasks this runtime reported, by outcome.
        self.reported: dict[str, int] = {
            "completed": 0,
            "failed": 0,
            "released": 0,
            "lost": 0,
            "refused": 0,
        }

    def set_lease_ttl(self, seconds: float) -> None:
        self._ttl = seconds

    async def run(self) -> None:
        """Work until stop(); returns once every slot has ended."""
        self._slots = [
            asyncio.create_task(self._slot(i), name=f"{self.name}-slot-{i}")
            for i in range(self._concurrency)
        ]
        self._leasing = asyncio.create_task(self._lease_loop(), name=f"{self.name}-leasing")
        await asyncio.gather(*self._slots, return_exceptions=True)

    async def stop(self, grace_seconds: float = 30.0) -> None:
        """Lease nothing more; finish running tasks within the grace, hand back
        the rest; a report in flight gets the report grace, then is given up."""
        self._stopping.set()
        signing_off = asyncio.create_task(self._signing_off())
        # Leasing ends first: a parked long-poll would lease again the very
        # tasks this runtime hands back (pending at once), and strand them.
        if self._leasing is not None:
            self._leasing.cancel()
            await asyncio.gather(self._leasing, return_exceptions=True)
        running = list(self._running.values())
        if running:
            _, unfinished = await asyncio.wait(running, timeout=grace_seconds)
            for task in unfinished:
                task.cancel()
            await self._give_up_after_report_grace(unfinished)
        for slot in self._slots:
            slot.cancel()
        await asyncio.gather(*self._slots, return_exceptions=True)
        unstarted = [self._ready.get_nowait() for _ in range(self._ready.qsize())]
        await self._hand_back([*unstarted, *self._eager.values()])
        self._eager.clear()
        await signing_off

    async def _give_up_after_report_grace(self, cancelled: set[asyncio.Task[None]]) -> None:
        """Cancelled executions hand their tasks back, or finish a completion
        report in flight; whatever is still at it after the report grace is
        given up (its lease runs out, and the reaper requeues it)."""
        if not cancelled:
            return
        _, held = await asyncio.wait(cancelled, timeout=self._report_grace)
        if held:
            log.warning(
                "reports not delivered within the report grace; "
                "their tasks are left to their leases' expiry",
                extra={"who": self.name, "tasks": len(held), "seconds": self._report_grace},
            )
            self._abandon.set()
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)

    async def _signing_off(self) -> None:
        """Tell the server, once, best effort: unreachable, it finds out when
        the presence window passes."""
        if self._sign_off is None:
            return
        try:
            await self._sign_off(f"{self.name} is stopping")
        except Exception as exc:
            log.warning("sign-off not delivered", extra={"who": self.name, "error": str(exc)})
        else:
            log.info("signed off", extra={"who": self.name})

    # -- slots

    async def _slot(self, index: int) -> None:
        self.live_slots += 1
        log.info(
            "slot started", extra={"who": self.name, "slot": index, "live_slots": self.live_slots}
        )
        try:
            await self._work(index)
        finally:
            self.live_slots -= 1
            log.log(
                logging.INFO if self._stopping.is_set() else logging.ERROR,
                "slot ended",
                extra={"who": self.name, "slot": index, "live_slots": self.live_slots},
            )

    async def _work(self, index: int) -> None:
        task: LeasedTask | None = None
        while not self._stopping.is_set():
            if task is None:
                task = await self._next_task()
            if self._stopping.is_set():
                # Leased while stop() began: stop's grace does not cover it,
                # so hand it back at once, unstarted, to run elsewhere.
                await self._hand_back([task])
                return
            execution = asyncio.create_task(self._execute(task), name=f"task-{task.id}")
            self._running[task.id] = execution
            try:
                await asyncio.shield(execution)
            except asyncio.CancelledError:
                if not execution.done():
                    # stop() gave up on this task: the execution hands it back.
                    await asyncio.gather(execution, return_exceptions=True)
                return
            except Exception:
                # A slot outlives any one task: the reaper recovers this one.
                log.exception("task execution broke; the slot goes on", extra={"task_id": task.id})
            finally:
                self._running.pop(task.id, None)
            task = self._eager.pop(task.id, None)

    async def _next_task(self) -> LeasedTask:
        """The next leased task for this slot, from the leasing loop."""
        self._idle += 1
        self._wanted.set()
        try:
            return await self._ready.get()
        finally:
            self._idle -= 1

    async def _lease_loop(self) -> None:
        """One lease call at a time, for as many tasks as slots are free."""
        while not self._stopping.is_set():
            free = self._idle - self._ready.qsize()
            if free <= 0:
                self._wanted.clear()
                await self._wanted.wait()
                continue
            leasing = asyncio.create_task(self._lease(free))
            try:
                leased = await leasing
            except asyncio.CancelledError:
                await self._hand_back_if_leased(leasing)
                raise
            for task in leased:
                self._ready.put_nowait(task)

    async def _hand_back_if_leased(self, leasing: asyncio.Task[list[LeasedTask]]) -> None:
        """stop() cancelled a lease call. If tasks had already come back,
        return them to the queue at once rather than leave them to the reaper."""
        leasing.cancel()
        outcome = await asyncio.gather(leasing, return_exceptions=True)
        if isinstance(outcome[0], list):
            await self._hand_back(outcome[0])

    async def _hand_back(self, tasks: list[LeasedTask], checkpoint: str = "") -> None:
        """Back to the queue at once, no attempt spent: this runtime is
        stopping. Best effort: unsent, the lease runs out instead."""
        for task in tasks:
            try:
                await self._source.release(
                    task, f"{self.name} stopping", checkpoint=checkpoint or "before it started"
                )
            except Exception as exc:
                log.warning(
                    "hand-back not delivered; the task waits for its lease to expire",
                    extra={"task_id": task.id, "error": str(exc)},
                )
            else:
                self.reported["released"] += 1
                log.info("task handed back", extra={"task_id": task.id, "checkpoint": checkpoint})

    async def _lease(self, max_tasks: int) -> list[LeasedTask]:
        # Any error backs off and tries again: no answer may end the leasing.
        leased: list[LeasedTask] = []
        async for attempt in backoff(
            self._max_backoff, self.name, retry_on=_any_error, server_outage=self.server_outage
        ):
            with attempt:
                leased = await self._source.lease(self._wait, max_tasks)
        # Returned after the loop, not from inside it: the loop's last turn
        # is what tells the backoff (and its server_outage) that this worked.
        return leased

    # -- one task

    async def _execute(self, task: LeasedTask) -> None:
        context = TaskContext(task)
        context.ask_cancel = lambda: self._source.heartbeat(task, dict(context.progress))
        handler = self._handlers.get(task.kind)
        if handler is None:
            known = ", ".join(sorted(self._handlers)) or "none"
            await self._report_failure(
                task,
                f"{self.name} cannot run tasks of kind {task.kind!r} (it runs: {known})",
                retryable=False,
            )
            return
        log.info(
            "task started", extra={"task_id": task.id, "kind": task.kind, "attempt": task.attempt}
        )
        work: asyncio.Task[TaskResult] = asyncio.create_task(
            handler(context), name=f"handler-{task.id}"
        )
        beats = asyncio.create_task(self._heartbeats(context, work))
        report = context.redacted
        try:
            result = await work
        except TaskCancelled as exc:
            await self._report_failure(task, str(exc) or "cancelled by request", retryable=False)
        except NonRetryable as exc:
            await self._report_failure(task, report(str(exc)), retryable=False)
        except asyncio.CancelledError:
            if beats.done() and isinstance(beats.exception(), LeaseLost):
                self.reported["lost"] += 1
                log.warning("lease lost; task stopped", extra={"task_id": task.id})
                return
            # stop(): hand the task back so it runs again at once elsewhere.
            await self._hand_back([task], context.checkpoint or "as it started")
            raise
        except Exception as exc:
            error = report(describe(exc))
            if getattr(exc, "outage", False):
                if getattr(exc, "lost", True) or task.free_retries > 0:
                    # Its database went away for a moment (a session lost,
                    # or an outage streak not over): not the work's fault.
                    log.warning(
                        "database unreachable; handing the task back",
                        extra={"task_id": task.id, "kind": task.kind, "error": error},
                    )
                    await self._release_for_outage(task, error, context.checkpoint)
                    return
                # Refused at its first connect with no outage before: more
                # often a wrong address than a database away, so retried as
                # any transient failure is, spending an attempt.
                log.warning(
                    "database refused the first connect; not an outage, the attempt is spent",
                    extra={"task_id": task.id, "kind": task.kind, "error": error},
                )
            log.warning(
                "task failed", extra={"task_id": task.id, "kind": task.kind, "error": error}
            )
            # The traceback may quote a resolved secret: only where asked for.
            log.debug("task failure traceback", exc_info=True, extra={"task_id": task.id})
            # Classified where it was raised (a provider's PermanentError or
            # ConfigError says False); anything unclassified is retried.
            retryable = bool(getattr(exc, "retryable", True))
            await self._report_failure(task, error, retryable=retryable)
        else:
            try:
                typed = redacted(check_result(task.kind, result), report)
            except MalformedResult as exc:
                # A handler's bug: say so in the job, rather than report a
                # result the server would have to guess at.
                await self._report_failure(task, str(exc), retryable=False)
            else:
                await _delivered(
                    self._report(lambda: self._complete(task, typed), "completed", task),
                    self._abandon,
                )
        finally:
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError, LeaseLost):
                await beats

    async def _heartbeats(self, context: TaskContext, work: asyncio.Task[Any]) -> None:
        # A lease is known live only until `ttl` after the last beat the
        # server answered was sent. Past that, less a margin, another runtime
        # may hold the task: stop it (its destination transaction rolls back)
        # rather than write on unfenced. Each beat waits a third of the TTL
        # at most, so a silent partition is noticed in time.
        # Rows moving (context.moved) bring the beat forward to PROGRESS_SECONDS
        # after the last one; the first comes as soon as rows move.
        clock = asyncio.get_running_loop()
        interval = self._ttl / 3
        confirmed = clock.time()
        due = confirmed + interval
        last = confirmed - PROGRESS_SECONDS
        while True:
            deadline = confirmed + self._ttl * (1 - LEASE_MARGIN)
            wake = min(due, deadline)
            if context.moved.is_set():
                await asyncio.sleep(max(0.0, min(wake, last + PROGRESS_SECONDS) - clock.time()))
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(wake):
                        await context.moved.wait()
                    continue  # rows moved: at the progress cadence, from here
            sent = last = clock.time()
            if sent >= deadline:
                self._stop_unconfirmed(context, work, sent - confirmed)
            due = sent + interval / 3  # after a failure, try again soon
            context.moved.clear()  # what moved until now rides this beat
            try:
                async with asyncio.timeout_at(min(sent + interval, deadline)):
                    cancel = await self._source.heartbeat(context.task, dict(context.progress))
                confirmed, due = sent, sent + interval
                self.server_outage.reached(who=self.name)
                if cancel and not context.cancel_requested.is_set():
                    log.info("cancel requested", extra={"task_id": context.task.id})
                    context.cancel_requested.set()
            except LeaseLost:
                work.cancel()
                raise
            except (*TRANSIENT, TimeoutError) as exc:
                # An outage is said once (by whichever call meets it first).
                self.server_outage.failed(exc, who=self.name)
                log.debug("heartbeat failed; will try again", extra={"error": str(exc)})
            except Exception:
                # Not transient, yet giving up would let the lease lapse
                # silently while the task works on: say so, and beat again.
                log.exception(
                    "heartbeat refused; will try again", extra={"task_id": context.task.id}
                )

    def _stop_unconfirmed(
        self, context: TaskContext, work: asyncio.Task[Any], silent: float
    ) -> NoReturn:
        log.warning(
            "lease unconfirmed; task stopped",
            extra={"task_id": context.task.id, "seconds": round(silent, 1), "ttl": self._ttl},
        )
        work.cancel()
        raise LeaseLost(f"no heartbeat answered for {silent:.1f} s of a {self._ttl:g} s lease")

    async def _complete(self, task: LeasedTask, result: TaskResult) -> None:
        """Report success, asking for this slot's next task in the answer
        unless stopping (then one that comes anyway is handed back)."""
        upcoming = await self._source.complete(task, result, lease_next=not self._stopping.is_set())
        if upcoming is None:
            return
        if self._stopping.is_set():
            await self._hand_back([upcoming])
        else:
            self._eager[task.id] = upcoming

    async def _report_failure(self, task: LeasedTask, error: str, *, retryable: bool) -> None:
        # Delivered like a completion: a failure cut off at stop's grace would
        # leave the task to its lease, and a permanent failure would run again.
        await _delivered(
            self._report(lambda: self._source.fail(task, error, retryable), "failed", task),
            self._abandon,
        )

    async def _release_for_outage(self, task: LeasedTask, error: str, checkpoint: str) -> None:
        await _delivered(
            self._report(
                lambda: self._source.release(task, error, checkpoint=checkpoint, outage=True),
                "released",
                task,
            ),
            self._abandon,
        )

    async def _report(
        self, call: Callable[[], Awaitable[None]], outcome: str, task: LeasedTask
    ) -> None:
        try:
            async for attempt in backoff(
                self._max_backoff, self.name, server_outage=self.server_outage
            ):
                with attempt:
                    await call()
        except LeaseLost:
            self.reported["lost"] += 1
            log.warning("report refused: lease lost", extra={"task_id": task.id})
            return
        except Exception as exc:
            # Refused for good (a malformed result, a server error): say so
            # once, as a failure nobody should retry, rather than go silent.
            log.exception("report refused", extra={"task_id": task.id, "outcome": outcome})
            if outcome == "completed":
                with contextlib.suppress(Exception):
                    await self._source.fail(
                        task, f"the server refused the result: {describe(exc)}", False
                    )
            self.reported["refused"] += 1
            return
        self.reported[outcome] += 1


async def _delivered(report: Awaitable[None], abandon: asyncio.Event) -> None:
    """Await a report (a completion, a failure, a hand-back) that stop()'s
    task grace does not cut short:
    cancelled in flight, the server might apply it or not, and the task would
    run again. The report finishes; then the cancel goes on. Only once stop()
    sets `abandon` (its report grace spent) is the report cancelled: the
    lease then decides, fenced by its token, and a load that runs again finds
    its markers (nothing applies twice)."""
    reporting = asyncio.ensure_future(report)
    cancelled = False
    while not reporting.done():
        if cancelled and abandon.is_set():
            reporting.cancel()
            await asyncio.gather(reporting, return_exceptions=True)
            raise asyncio.CancelledError
        try:
            await asyncio.shield(reporting)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    reporting.result()
