"""What a handler sees of the task it runs, and how it says how it ended."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Protocol
from urllib.parse import quote, quote_plus

from setu_tasks.results import TaskResult
from setu_tasks.specs import LeasedTask

# Shorter values (a port, "on") would blank out unrelated text.
MIN_REDACTED = 3
# What a heartbeat carries (TaskProgress in protos/setu/v1/agents.proto).
# stored_parts: an extract's parts stored whole (setu_tasks/codec/agents.py stored_part_progress);
# streams: each stream's counts so far ([{"stream", "rows_extracted", "rows_loaded"}]).
PROGRESS_FIELDS = frozenset(
    {"rows_read", "rows_written", "stream", "message", "stored_parts", "streams", "rows_total"}
)


def describe(exc: BaseException) -> str:
    """A failure as the job's timeline shows it: an error that speaks for
    itself (`plain_message = True`: provider, blob, staging errors) as is;
    anything else with its type, since the type is part of the story."""
    if getattr(exc, "plain_message", False):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _spellings(secret: str) -> Iterator[str]:
    """The forms in which a message may quote a secret."""
    if len(secret) < MIN_REDACTED:
        return
    yield secret
    yield json.dumps(secret)[1:-1]
    yield json.dumps(secret, ensure_ascii=False)[1:-1]
    yield quote(secret, safe="")
    yield quote_plus(secret)
    encoded = secret.encode()
    yield base64.b64encode(encoded).decode()
    yield base64.urlsafe_b64encode(encoded).decode()
    yield base64.b64encode(encoded).decode().rstrip("=")


class TaskCancelled(Exception):
    """Raised by a handler that stopped because its job asked to cancel."""

    # The engine (which never imports the runtime) tells a cancel by this:
    # no attempt follows, so a resumable load drops its staging table.
    cancels = True


class NonRetryable(Exception):
    """A failure that another attempt cannot fix (bad config, unknown kind)."""


class TaskContext:
    """Handed to a handler: the task, its cancellation signal, a progress sink."""

    def __init__(self, task: LeasedTask) -> None:
        self.task = task
        self.cancel_requested = asyncio.Event()
        # Asks the server now (a heartbeat) whether the job wants to stop;
        # the runtime loop sets it. For a last word before a commit.
        self.ask_cancel: Callable[[], Coroutine[Any, Any, bool]] | None = None
        self.progress: dict[str, Any] = {}
        # Set when rows moved since the last heartbeat (beat_soon): the
        # runtime beats sooner than its lease needs, at most every
        # PROGRESS_SECONDS, so the run's counts stay live.
        self.moved = asyncio.Event()
        # Secret values this task resolved: never in what it reports.
        self.redact: set[str] = set()
        # Where the work stands ("extract of events, part 7"), for the job's
        # timeline when the task is handed back; the reporters keep it.
        self.checkpoint = ""

    def redacted(self, text: str) -> str:
        """text with every secret this task resolved replaced by `***`: a
        provider's message may quote a host or a user, as it is or escaped
        (JSON, a URL, base64)."""
        spellings = {s for secret in self.redact for s in _spellings(secret)}
        for spelling in sorted(spellings, key=len, reverse=True):
            text = text.replace(spelling, "***")
        return text

    def report(self, **progress: Any) -> None:
        """Progress to send with the next heartbeat (rows_read, rows_written,
        stream, message); any other name is a TypeError here, at its source."""
        unknown = sorted(set(progress) - PROGRESS_FIELDS)
        if unknown:
            raise TypeError(f"no progress field(s) {', '.join(unknown)}")
        self.progress.update(progress)

    def beat_soon(self) -> None:
        """Rows moved: the next heartbeat carries the progress within
        PROGRESS_SECONDS (runtime/loop.py), not at the lease's cadence."""
        self.moved.set()

    def check_cancelled(self) -> None:
        """Call once per batch: raises TaskCancelled when the job asked to stop."""
        if self.cancel_requested.is_set():
            raise TaskCancelled("cancelled by request")

    async def confirm_not_cancelled(self) -> None:
        """Before a commit: asks the server rather than wait for the next
        heartbeat, and raises TaskCancelled when the job asked to stop."""
        if self.ask_cancel is not None and await self.ask_cancel():
            self.cancel_requested.set()
        self.check_cancelled()


# A handler ends with its kind's typed result (setu_tasks/results.py).
Handler = Callable[[TaskContext], Coroutine[Any, Any, TaskResult]]


class TaskSource(Protocol):
    """Where a runtime gets work and reports it: the server over gRPC (agents)
    the cloud worker's too."""

    async def lease(self, wait_seconds: float, max_tasks: int = 1) -> list[LeasedTask]:
        """Up to `max_tasks` tasks, as soon as any is there; none after the wait."""
        ...

    async def heartbeat(self, task: LeasedTask, progress: dict[str, Any]) -> bool:
        """True when cancellation was requested; raises LeaseLost when the lease is gone."""
        ...

    async def complete(
        self, task: LeasedTask, result: TaskResult, *, lease_next: bool = False
    ) -> LeasedTask | None:
        """Report success; with `lease_next`, maybe the runtime's next task
        (an eager lease: one round trip per task for a busy runtime)."""
        ...

    async def fail(self, task: LeasedTask, error: str, retryable: bool) -> None: ...

    async def release(
        self, task: LeasedTask, message: str, *, checkpoint: str = "", outage: bool = False
    ) -> None:
        """Hand the task back without spending an attempt: this runtime is
        stopping, or (`outage`) a database the task works on went away for a
        moment. `checkpoint` says where the work stood."""
        ...
