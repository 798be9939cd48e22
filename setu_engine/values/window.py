"""What one read of a stream covers, and the mark it reaches.

An incremental stream (setu_engine/planning/incremental.py decides which,
and the window of a run) is read in a window on its cursor: `Since`, which a
Stream carries to its source; what the stream's state advances to once the
load commits is its `CursorMark`. A file stream is incremental by object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A file stream is incremental by object: its mark is the JSON of the
# objects read ({"objects": {name: signature}, "modified": latest}).
OBJECTS = "files"


@dataclass(frozen=True)
class CursorMark:
    """The highest cursor value a stream's extract reached: carried in the
    staged manifest and the typed results to whoever records the load."""

    column: str
    type: str
    value: str

    def to_dict(self) -> dict[str, str]:
        return {"column": self.column, "type": self.type, "value": self.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> CursorMark | None:
        if not data:
            return None
        return cls(str(data["column"]), str(data["type"]), str(data["value"]))


@dataclass(frozen=True)
class Since:
    """What one incremental read of a stream covers."""

    cursor: str
    cursor_type: str
    # None: the first read of the stream (everything up to `high`).
    low: str | None = None
    # Filled by the source before reading: the highest cursor value present.
    high: str | None = None
    # The source held no row in the window when the run started: read none.
    empty: bool = False
    # `cursor >= low` (upsert: a tie re-read is applied once) or `> low`
    # (append: a tie re-read would be a duplicate).
    inclusive: bool = True

    @property
    def mark(self) -> CursorMark | None:
        """What the state advances to once this read is loaded."""
        if self.high is None:
            return None
        return CursorMark(self.cursor, self.cursor_type, self.high)

    def describe(self) -> str:
        if self.cursor_type == OBJECTS:
            return _describe_objects(self)
        if self.low is None:
            return f"incremental on {self.cursor}: first read (everything)"
        return f"incremental from {self.cursor} {'>=' if self.inclusive else '>'} {self.low}"


def _describe_objects(window: Since) -> str:
    now = objects_of(window.high)
    if window.low is None:
        return f"incremental by object: first read ({_files(len(now))})"
    if window.empty:
        return f"incremental by object: {_files(len(now))} unchanged since the last run, none read"
    before = objects_of(window.low)
    fresh = sum(1 for name, sig in now.items() if before.get(name) != sig)
    return f"incremental by object: {fresh} new or changed of {_files(len(now))}"


def _files(count: int) -> str:
    return f"{count} file{'' if count == 1 else 's'}"


def objects_of(value: str | None) -> dict[str, str]:
    """A file stream's mark (or saved state) as object name → signature."""
    if not value:
        return {}
    try:
        objects = json.loads(value).get("objects", {})
    except (ValueError, AttributeError):
        return {}  # not a mark this engine wrote: read everything again
    return {str(k): str(v) for k, v in objects.items()} if isinstance(objects, dict) else {}
