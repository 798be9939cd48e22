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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Increments = Literal["cursor", "object"]


@dataclass(frozen=True)
class Capabilities:
    copy_out: bool = False
    copy_in: bool = False
    json_lines_out: bool = False
    json_lines_in: bool = False
    resumable_rows: bool = False
    resumable_copies: bool = False
    counts_rows: bool = False
    staged_loads: bool = False
    inspectable: bool = False
    increments: Increments | None = None
    reusable_sessions: bool = False

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
