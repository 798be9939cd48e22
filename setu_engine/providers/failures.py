"""The shape every provider's driver-error rules share (docs/errors.md,
"Task failures: permanent or transient"), and the rules that are not any
one driver's.

Each provider keeps its own driver's rules in its subpackage
(providers/postgres/failures.py, providers/sqlite/failures.py,
providers/files/failures.py): one function per driver, `(exc, what) ->
ProviderError`, called where the provider catches that driver's error, so
a failure is classified once, at its source, and the agent and the cloud
worker report it alike. A rule answers OutageError (the database went away
for a moment: retried without spending an attempt), TransientError,
PermanentError (its message names the fix, in parentheses, and `fields`
the config keys to check), or, for an error no rule places, a plain
ProviderError, which is retried.
"""

from __future__ import annotations

from collections.abc import Sequence

from setu_engine.errors import OutageError, PermanentError, TransientError

# The fix every provider names for a row that repeats a key of the
# destination (an append into a table with one), in the same words.
DUPLICATE_KEY = (
    "a row repeats a unique key of the destination table: use write_mode upsert "
    "or overwrite, or clear the table"
)


def permanent(message: str, fix: str, fields: Sequence[str] = ()) -> PermanentError:
    """`message (fix)`: what failed, then what to do about it."""
    return PermanentError(f"{message} ({fix})", fields=tuple(fields))


def network_error(
    exc: BaseException, message: str, *, lost: bool = True
) -> OutageError | TransientError | None:
    """A socket's own failure, whatever the driver on it: refused, reset or
    aborted (a ConnectionError) is an outage (`lost`: a session existed, as
    OutageError says), any other OS error or a timeout is transient; None
    for an error that is not the network's."""
    if isinstance(exc, ConnectionError):
        return OutageError(message, lost=lost)
    if isinstance(exc, OSError | TimeoutError):
        return TransientError(message)
    return None
