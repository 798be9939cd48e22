"""The engine's neutral kinds, on its ground floor (they import nothing
else of the engine): how a write treats the rows already there, a binary
COPY batch, the rows per batch, and what a write's rows did to the destination."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# Rows per batch: the grain of progress, cancellation and staged parts. On
# the ground floor so the server's settings name it without importing more
# of the engine.
DEFAULT_BATCH_ROWS = 100_000


class WriteMode(StrEnum):
    APPEND = "append"
    OVERWRITE = "overwrite"
    UPSERT = "upsert"
    MERGE = "merge"

    @property
    def needs_key(self) -> bool:
        return self in (WriteMode.UPSERT, WriteMode.MERGE)


@dataclass(frozen=True)
class CopyBatch:
    """Rows as one complete PostgreSQL binary COPY stream (staged/pgcopy.py)."""

    data: bytes
    rows: int
    # Where the source's read stood after these rows, for a read that can
    # resume there (ResumableSource); "" otherwise.
    position: str = ""


@dataclass(frozen=True)
class RowChanges:
    """What a write's rows did to the destination: rows new to it, rows whose
    values changed, and rows already there with the same values (which an
    upsert or merge leaves untouched: no new row version, no WAL)."""

    inserted: int
    updated: int = 0
    unchanged: int = 0
    # Destination rows a merge deleted (their keys left the source): not
    # among the write's rows, which are inserted + updated + unchanged.
    deleted: int = 0


class Written(int):
    """The rows a write took (the int every caller reads), with the changes
    they made when the provider can tell: a write that returns a plain int
    (a file, a load found already done) reports no changes."""

    changes: RowChanges

    def __new__(cls, rows: int, changes: RowChanges) -> Written:
        written = super().__new__(cls, rows)
        written.changes = changes
        return written


def changes_of(written: int) -> RowChanges | None:
    return written.changes if isinstance(written, Written) else None
