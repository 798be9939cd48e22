"""Every error the engine raises on purpose, under one root: EngineError.

The engine's ground floor: it imports nothing else of the engine, so any
module may raise these. What each means to a run (docs/errors.md):

- `ProviderError` and its two kinds: `PermanentError` (another attempt
  cannot fix it: the task fails at once) and `TransientError` (retried with
  backoff; `OutageError`, a database away for a moment, retried without
  spending an attempt). `retryable` says which; a plain ProviderError is
  retried. A bad value, `ValueFault`, is permanent.
- The ValueErrors of a wrong input, each naming what is wrong: a connection's
  config (`ConfigError`, never retried), a pipeline spec and its parts
  (`SpecError`, `SyncError`, `ExprError`, `BlockingError`, `TypeNameError`,
  `SqlTypeError`), an operator met on a row (`OperatorError`, `CastError`,
  and `RowFault`, located and permanent), a secrets file.
- The staged format's own: `BlobError` (`BlobNotFound`) and `StagingError`.

Each keeps the base classes it has always had (a ConfigError is a
ValueError, not a ProviderError), so whoever catches one catches what it
always caught; EngineError only joins them under one name.
"""

from __future__ import annotations

from typing import Any


class EngineError(Exception):
    """An error the engine raised on purpose, its message fit to show."""


# --- a wrong input: config, spec, types ------------------------------------


class ConfigError(EngineError, ValueError):
    """The connection's config is wrong; the message says which field and why.
    Another attempt cannot fix it."""

    retryable = False


class SpecError(EngineError, ValueError):
    """The spec is wrong; the message names the path, e.g.
    "spec.operators[2].columns: unknown column 'x' (stream has: id, name)"."""


class SyncError(EngineError, ValueError):
    """A `sync` section that cannot be run; the message names the path."""


class ExprError(EngineError, ValueError):
    """A filter that does not parse or does not type-check; `pos` is 1-based."""

    def __init__(self, message: str, pos: int = 0) -> None:
        super().__init__(message)
        self.pos = pos


class BlockingError(EngineError, ValueError):
    """The operator does not fit the stream's columns; names the path."""


class TypeNameError(EngineError, ValueError):
    pass


class SqlTypeError(EngineError, ValueError):
    """A SQL type name Setu does not keep; the message lists what it takes."""


class InvalidSecretsFile(EngineError, ValueError):
    """The file cannot be read or is not in the format above."""


# --- the provider: permanent or transient ---------------------------------


class ProviderError(EngineError):
    """The provider failed (unreachable, refused, bad data); the message is
    the provider's own, fit to show the user.

    `retryable` is how the runtime reports a task that fails with it. A
    provider classifies its driver's errors where it raises them (its
    subpackage's failures.py, docs/errors.md): PermanentError or
    TransientError. One it cannot place stays a plain ProviderError and is
    retried, as a transient one is."""

    plain_message = True
    retryable = True


class PermanentError(ProviderError):
    """Another attempt cannot fix it (credentials refused, an object missing,
    a constraint violated, a spec or type that does not fit, a bad value):
    the task fails at once, and the message names the fix.

    `fields` names the config fields a person should check (the credentials
    refused): the runtime, which knows which of them are secret references,
    names those secrets, never their values."""

    retryable = False

    def __init__(self, message: str, *, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = fields


class TransientError(ProviderError):
    """Another attempt may well succeed (connection refused or reset, a
    timeout, a serialization failure or deadlock, S3 throttling or 5xx):
    the task is retried with backoff."""

    retryable = True


class OutageError(TransientError):
    """The database went away for a moment (connection refused or reset, the
    server shutting down or starting up): not the work's fault, so the task
    is handed back for a retry without spending an attempt, as long as the
    server grants free retries (SETU_OUTAGE_FREE_RETRIES).

    `lost` says whether a session existed: True when a connection that was
    open went away (reset or closed under it, the server shutting down),
    False when the connector's first connect was refused. A refused first
    connect is more often a wrong address than a database away, so the
    runtime hands the task back for it only while the task is already in an
    outage streak (a free retry spent); otherwise it spends an attempt."""

    outage = True

    def __init__(self, message: str, *, lost: bool = True) -> None:
        super().__init__(message)
        self.lost = lost


class ConnectionClosed(ProviderError):
    """A call met its connection closed under it: this runtime closed it,
    as a cancelled or stopping task unwinds. Neither the data's fault nor
    the spec's, so it names no fix; a run that was not cancelled retries."""


# --- a bad value, an operator met on a row --------------------------------


def excerpt(value: Any, limit: int = 60) -> str:
    """A short, printable piece of a value for a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ValueFault(PermanentError, ValueError):
    """A value that cannot be read, converted or written. Another attempt
    would meet the same value, so it is permanent; the message names the
    stream, column, row (1-based, in the order read) and a short excerpt.

    Also a ValueError, as a converter's own failures are.

    Raised where the value is met (often knowing only its column and its
    place in a batch) and `located` on its way up by whoever knows the
    stream and how many rows came before."""

    def __init__(
        self,
        reason: str,
        *,
        column: str | None,
        value: Any,
        row: int | None = None,
        stream: str | None = None,
    ) -> None:
        self.reason = reason
        self.column = column
        self.value = value
        self.row = row
        self.stream = stream
        super().__init__(self._message())

    def _message(self) -> str:
        where = [f"stream {self.stream!r}"] if self.stream else []
        if self.column is not None:
            where.append(f"column {self.column!r}")
        if self.row is not None:
            where.append(f"row {self.row}")
        place = ", ".join(where) or "a value"
        return f"{place}: {self.reason} (value {excerpt(self.value)})"

    def located(self, stream: str | None = None, rows_before: int = 0) -> ValueFault:
        """This fault with the stream named and its row counted from the
        stream's start (rows_before: rows of earlier batches). A fault
        already located is returned as it is."""
        if self.stream:
            return self
        row = None if self.row is None else self.row + rows_before
        return ValueFault(
            self.reason,
            column=self.column,
            value=self.value,
            row=row,
            stream=self.stream or stream,
        )


class OperatorError(EngineError, ValueError):
    """A row the chain cannot process (an uncastable value, a division by
    zero); PostgreSQL raises for the same row in the compiled SQL."""


class CastError(OperatorError):
    """A value a cast cannot convert, with its column and the value."""

    def __init__(self, reason: str, column: str, value: Any) -> None:
        self.reason = reason
        self.column = column
        self.value = value
        super().__init__(f"column {column!r}: {reason}")


class RowFault(ValueFault, OperatorError):
    """An OperatorError met running a chain over a row, located: a bad
    value, so permanent (ValueFault), naming column (for a cast) and row."""


# --- the staged format ----------------------------------------------------


class BlobError(EngineError):
    """A blob operation failed; the message names the key, the backend and why."""

    plain_message = True


class BlobNotFound(BlobError):
    pass


class StagingError(EngineError):
    """Staged data is missing, or does not match its manifest."""

    plain_message = True
