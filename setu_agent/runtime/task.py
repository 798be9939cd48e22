"""What a handler sees of the task it runs, and how it says how it ended."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

# Shorter values (a port, "on") would blank out unrelated text.
MIN_REDACTED = 3


@dataclass(frozen=True)
class LeasedTask:
    id: str
    job_id: str
    kind: str
    attempt: int
    max_attempts: int
    lease_token: str
    payload: dict[str, Any] = field(default_factory=dict)


def describe(exc: BaseException) -> str:
    """A failure as the job's timeline shows it: an error that speaks for
    itself (`plain_message = True`: provider, blob, staging errors) as is;
    anything else with its type, since the type is part of the story."""
    if getattr(exc, "plain_message", False):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class TaskCancelled(Exception):
    """Raised by a handler that stopped because its job asked to cancel."""


class NonRetryable(Exception):
    """A failure that another attempt cannot fix (bad config, unknown kind)."""


class TaskContext:
    """Handed to a handler: the task, its cancellation signal, a progress sink."""

    def __init__(self, task: LeasedTask) -> None:
        self.task = task
        self.cancel_requested = asyncio.Event()
        self.progress: dict[str, Any] = {}
        # Secret values this task resolved: never in what it reports.
        self.redact: set[str] = set()

    def redacted(self, text: str) -> str:
        """text with every secret this task resolved replaced by `***`: a
        provider's message may quote a host or a user."""
        for secret in sorted(self.redact, key=len, reverse=True):
            if len(secret) >= MIN_REDACTED:
                text = text.replace(secret, "***")
        return text

    def report(self, **progress: Any) -> None:
        """Progress to send with the next heartbeat (rows_read, rows_written, stream, message)."""
        self.progress.update(progress)

    def check_cancelled(self) -> None:
        """Call once per batch: raises TaskCancelled when the job asked to stop."""
        if self.cancel_requested.is_set():
            raise TaskCancelled("cancelled by request")


Handler = Callable[[TaskContext], Coroutine[Any, Any, dict[str, Any]]]


class TaskSource(Protocol):
    """Where a runtime gets work and reports it: the server over gRPC (agents)
    or the store directly (the cloud worker inside the server)."""

    async def lease(self, wait_seconds: float) -> LeasedTask | None: ...

    async def heartbeat(self, task: LeasedTask, progress: dict[str, Any]) -> bool:
        """True when cancellation was requested; raises LeaseLost when the lease is gone."""
        ...

    async def complete(self, task: LeasedTask, result: dict[str, Any]) -> None: ...

    async def fail(self, task: LeasedTask, error: str, retryable: bool) -> None: ...
