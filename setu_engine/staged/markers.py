"""Load markers: how a load applies exactly once (docs/flows.md).

Every load writes a marker in the destination, in the same transaction as
its rows (for files: an object written last), naming the run, the stream
and the part. A load checks for its marker first and, when it is there,
writes nothing and answers the rows the marker recorded. So a load that
runs again (its result lost on the way to the server, its runtime killed
or cut off after the commit) is a no-op, whatever the write mode and
whichever runtime runs it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote

# The marker table (SQL destinations) or folder (file destinations). It is
# the runtime's, not a stream: discovery never offers it.
MARKERS = "_setu_loads"

# A stream loaded in one transaction; a load split into parts names each.
WHOLE = ""

# Whole-stream markers kept per stream, the newest: a load retried after its
# commit (its result lost) is of a recent run. Each load prunes the older
# ones, and other runs' part markers whose staging table is gone, in its
# own transaction (setu_engine/staged/resumable.py).
KEEP_MARKERS = 32


@dataclass(frozen=True)
class LoadMarker:
    """One load of one stream (or part of it) of one run."""

    run_id: str
    stream: str
    part: str = WHOLE

    def file_name(self) -> str:
        """`<run>/<stream>[.<part>].json`: one file name per piece, whatever
        the stream's name holds (slashes, dots)."""
        name = quote(self.stream, safe="")
        if self.part:
            name += "." + quote(self.part, safe="")
        return f"{quote(self.run_id, safe='')}/{name}.json"

    def document(self, rows: int) -> bytes:
        record = {"run_id": self.run_id, "stream": self.stream, "part": self.part, "rows": rows}
        return json.dumps(record).encode()

    def rows_in(self, document: bytes) -> int:
        """The rows a marker file recorded."""
        return int(json.loads(document)["rows"])


@dataclass(frozen=True)
class LoadIdentity:
    """Which run a load belongs to: every stream it writes is marked with it."""

    run_id: str

    def marker(self, stream: str, part: str = WHOLE) -> LoadMarker:
        return LoadMarker(self.run_id, stream, part)
