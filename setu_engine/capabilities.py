"""What a provider's connector can do beyond the Connector protocol, declared
once beside it instead of found by probing (docs/providers.md).

Every connector can test, discover, preview, read Python rows and write
them; that is all a connector declaring nothing is taken to do. Each flag
below turns on one path of the transfer, the planner or the runtime, and
each names the protocol the connector then implements (a unit test holds
every provider's declaration to its connector's methods):

- `copy_out`: reads binary COPY batches itself (`CopySource.copy_batches`),
  staged as they come, no row decoded.
- `copy_in`: loads binary COPY batches itself and runs the operator chain in
  its own SQL (`CopyDestination.write_copy`); its write is one transaction,
  so a load may also run beside its extract.
- `json_lines_out`: renders a stream as JSON Lines itself
  (`JsonLinesSource.json_lines`).
- `json_lines_in`: writes rows that come as JSON Lines already, for the
  write modes its `takes_json_lines` accepts (`JsonLinesDestination`).
- `csv_out`: renders a stream as CSV in the hand-off dialect
  (`CsvSource.csv_batches`; setu_engine/movement/transfer.py says the dialect).
- `csv_in`: parses that CSV into its own columnar batches, for the streams
  its `takes_csv` accepts (`CsvDestination`): no value becomes a Python
  object between the two ends.
- `resumable_rows`, `resumable_copies`: a retried extract reads only after
  the last stored part (`ResumableRows.read_after`,
  `ResumableCopies.copy_batches_after`; `resumes` says per stream).
- `counts_rows`: counts the rows it read from its system (`rows_read`).
- `staged_loads`: a large load goes through a staging table, part by part,
  and a retry resumes it (`StagingDestination`).
- `inspectable`: says what a target table holds and can create a schema and
  add columns ahead of a load (`InspectableDestination`).
- `increments`: how an incremental stream is read: "cursor" (a cursor
  column's high value, `CursorSource`), "object" (a stream is an object,
  read again when it changed, `ObjectSource`), or None (full reads only).
- `reusable_sessions`: the cloud worker's connection cache may hand its
  session to the next run (`Reusable`, setu_agent/cloud/connections.py).

What a write does with its rows, declared for the provider conformance
suite (tests/conformance/) to check, and for readers to trust:

- `reports_changes`: the write modes whose write answers what its rows did
  (`kinds.Written`, RowChanges: inserted, updated, unchanged, deleted); under
  any other mode it answers the rows only.
- `enforces_keys`: a table the write creates keeps the stream's key, so an
  append that repeats a key fails (PermanentError) instead of duplicating it.
- `values`: which edge values of a neutral type the provider refuses (a
  ValueFault naming stream, column and row; the target unchanged) or reads
  back changed, each a limitation docs/data-types.md lists; every other
  value of every neutral type round-trips exactly. `values_by_format`
  overrides it per `config.format` for a provider whose formats differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Increments = Literal["cursor", "object"]

# Edge values by name, as `values` declares them: "<neutral type>:<edge>".
EDGES = (
    "nan",  # real, double, numeric
    "infinity",  # either sign: real, double, numeric, date, timestamp, timestamptz
    "-0",  # real, double
    "empty",  # text '', bytes b''
    "big",  # numeric with 30 digits before the point or 10 after
    "scale",  # numeric's trailing zeros (1.10)
    "min",  # the type's least value (integers, real, double; year 1 of a date or timestamp)
    "max",  # its greatest (year 9999, 23:59:59.999999)
)


@dataclass(frozen=True)
class Values:
    """Edge values ("<type>:<edge>", EDGES) a provider cannot keep: those a
    write refuses, and those that read back changed (-0 as 0, '' as NULL,
    1.10 as 1.1)."""

    refuses: frozenset[str] = frozenset()
    loses: frozenset[str] = frozenset()


EXACT = Values()


@dataclass(frozen=True)
class Capabilities:
    copy_out: bool = False
    copy_in: bool = False
    json_lines_out: bool = False
    json_lines_in: bool = False
    csv_out: bool = False
    csv_in: bool = False
    resumable_rows: bool = False
    resumable_copies: bool = False
    counts_rows: bool = False
    staged_loads: bool = False
    inspectable: bool = False
    increments: Increments | None = None
    reusable_sessions: bool = False
    reports_changes: frozenset[str] = frozenset()
    enforces_keys: bool = False
    values: Values = EXACT
    values_by_format: tuple[tuple[str, Values], ...] = ()

    def values_of(self, format: str | None = None) -> Values:
        """What a connection of `format` (its config's, for a provider with
        formats) keeps of the edge values."""
        return dict(self.values_by_format).get(format or "", self.values)

    @property
    def resumable_reads(self) -> bool:
        """A retried extract can start after its last stored part."""
        return self.resumable_rows or self.resumable_copies


# A connector that declares nothing: rows in, rows out.
ROWS_ONLY = Capabilities()


def capabilities_of(connector: object) -> Capabilities:
    """What `connector` declares (its `capabilities`), ROWS_ONLY when it
    declares nothing."""
    declared = getattr(connector, "capabilities", None)
    return declared if isinstance(declared, Capabilities) else ROWS_ONLY
