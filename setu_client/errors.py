"""One error hierarchy for the server and the SDK.

Each class names its gRPC status code and, where one code covers several
meanings, a `reason` sent in the `setu-error-reason` trailer. `ERRORS` is the
one table mapping both ways: the server turns a raised error into a status
(`status_of`), the SDK turns a status back into the same class (`from_status`).
"""

from __future__ import annotations

from typing import ClassVar

import grpc

REASON_KEY = "setu-error-reason"
# Trailing metadata on every answer of a server that has begun to shut down
# (a parked long-poll answered early, too): a client with another address
# moves there before its next long-poll.
CLOSING_KEY = "setu-server-closing"


class SetuError(Exception):
    """Base of every error the service reports.

    `status` is the gRPC status code the call ended with, `message` the
    server's explanation, and `reason` (class-wide) the finer cause sent
    when one code covers several. `rpc_error` is the failed call as grpc
    reported it (its code, details, trailing metadata and debug string),
    None for an error the SDK raised itself. The SDK raises these without
    grpc's error chained under them: it would repeat the message in a
    traceback twice as long.
    """

    code: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN
    reason: ClassVar[str] = ""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.rpc_error: grpc.aio.AioRpcError | grpc.RpcError | None = None

    @property
    def status(self) -> grpc.StatusCode:
        return self.code


class InvalidArgument(SetuError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(SetuError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(SetuError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(SetuError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(SetuError):
    code = grpc.StatusCode.ABORTED


class Unauthenticated(SetuError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(SetuError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(SetuError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(SetuError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(SetuError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(SetuError):
    code = grpc.StatusCode.CANCELLED


class Unimplemented(SetuError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(SetuError):
    code = grpc.StatusCode.INTERNAL


class JobNotFound(NotFound):
    """The job does not exist, or belongs to another workspace.

    `job_id` is the id asked about ("" when the raiser did not say)."""

    reason = "job_not_found"

    def __init__(self, message: str = "", job_id: str = "") -> None:
        super().__init__(message)
        self.job_id = job_id


class JobNotStarted(FailedPrecondition):
    """The job is READY: it will not finish until somebody starts it.

    `job_id` is the id asked about ("" when the raiser did not say)."""

    reason = "job_not_started"

    def __init__(self, message: str = "", job_id: str = "") -> None:
        super().__init__(message)
        self.job_id = job_id


class IllegalTransition(FailedPrecondition):
    """A job or task cannot move from its current state to the one asked."""

    reason = "illegal_transition"


class LeaseLost(FailedPrecondition):
    """The runtime no longer holds the task's lease: stop working on it."""

    reason = "lease_lost"


class AgentOffline(FailedPrecondition):
    reason = "agent_offline"


class ServerClosing(Unavailable):
    """This server is shutting down and takes no new long-poll: retry, on
    another address of the target when it has one (the SDK moves there)."""

    reason = "server_closing"


class DatabaseUnavailable(Unavailable):
    """The server is up but its own database does not answer (down, or
    restarting): retry soon, it answers again the moment the database does.
    Runtimes keep their backoff short while they hear this."""

    reason = "database_unavailable"


class ClientClosed(Cancelled):
    """The SDK client was closed while the call was in flight."""

    reason = "client_closed"


ERRORS: tuple[type[SetuError], ...] = (
    InvalidArgument,
    NotFound,
    AlreadyExists,
    FailedPrecondition,
    Aborted,
    Unauthenticated,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
    DeadlineExceeded,
    Cancelled,
    Unimplemented,
    Internal,
    JobNotFound,
    JobNotStarted,
    IllegalTransition,
    LeaseLost,
    AgentOffline,
    ServerClosing,
    DatabaseUnavailable,
    ClientClosed,
)

_BY_CODE: dict[grpc.StatusCode, type[SetuError]] = {e.code: e for e in ERRORS if not e.reason}
_BY_REASON: dict[str, type[SetuError]] = {e.reason: e for e in ERRORS if e.reason}


def status_of(error: SetuError) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """The status code, details and trailing metadata that report `error`."""
    trailers = ((REASON_KEY, error.reason),) if error.reason else ()
    return error.code, error.message, trailers


def from_status(
    code: grpc.StatusCode, details: str, trailers: dict[str, str] | None = None
) -> SetuError:
    """The error a status stands for: by reason when one was sent, else by code."""
    reason = (trailers or {}).get(REASON_KEY, "")
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code, SetuError)
    return cls(details)


def from_rpc_error(error: grpc.aio.AioRpcError | grpc.RpcError) -> SetuError:
    """Translate a failed call into the SDK's error class."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    trailers: dict[str, str] = {}
    metadata = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in metadata or ():  # type: ignore[misc]  # stubs mistype the pairs
        if isinstance(value, str):
            trailers[key] = value
    translated = from_status(code, details or "", trailers)
    translated.rpc_error = error
    return translated
