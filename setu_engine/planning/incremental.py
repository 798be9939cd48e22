"""Incremental streams: which streams sync on a cursor, and the window a run
reads (docs/pipelines.md, "Incremental streams").

A pipeline spec's `sync` section names, per stream (or `"*"` for every
stream), `"full"` (the default) or `{"mode": "incremental", "cursor": col,
"lookback": n}`. A run is told each stream's saved cursor (text, as Setu's
database keeps it); the source reads `cursor >= saved - lookback` (the
boundary is inclusive so that rows sharing the saved value, committed after
the last run read it, are never lost) up to the highest value present when
the run started (`cursor <= high`), in cursor order. `high` is what the
stream's state advances to once its load commits.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol, cast, runtime_checkable

from setu_engine.capabilities import capabilities_of
from setu_engine.errors import ConfigError, SyncError
from setu_engine.values.types import INTEGERS, NUMBERS, Column, Stream, qualified
from setu_engine.values.window import OBJECTS, Since, objects_of

SYNC_KEY = "sync"
ALL_STREAMS = "*"
FULL = "full"
INCREMENTAL = "incremental"

TEMPORAL = frozenset({"date", "timestamp", "timestamptz"})
# Types whose order a cursor can follow (and whose text round-trips).
ORDERABLE = NUMBERS | TEMPORAL | {"text"}
OBJECT_COLUMN = "object"
MARK_TYPES = ORDERABLE | {OBJECTS}

_LOOKBACK = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class SyncRule:
    # "": no cursor column, for a source incremental by object (files).
    cursor: str
    # Seconds for a temporal cursor, units for a numeric one; 0: none.
    lookback: float = 0.0


def window_note(stream: Stream) -> tuple[str, str] | None:
    """(stream, job event) saying what a run reads of an incremental stream
    ("stream public.orders: incremental from id > 41"); written once per
    run, wherever its extract ran (a cloud extract writes it as it starts,
    an agent's travels in its typed result)."""
    if stream.since is None:
        return None
    name = qualified(stream)
    return name, f"stream {name}: {stream.since.describe()}"


def object_mark(objects: Mapping[str, tuple[str, str]]) -> str:
    """The mark of a file stream's objects (name → (signature, modified)):
    what its state holds once they are loaded."""
    modified = max((m for _, m in objects.values()), default="")
    return json.dumps(
        {"objects": {n: sig for n, (sig, _) in sorted(objects.items())}, "modified": modified},
        separators=(",", ":"),
    )


# Providers whose streams are objects, incremental without a cursor column.
BY_OBJECT = frozenset({"file"})


def _no_cursor_on_objects(stream: str) -> str:
    return (
        f"spec.{SYNC_KEY}.{stream}.cursor: a file stream is incremental by object "
        f"(a run reads only new or changed files); remove the cursor"
    )


def check_provider(rules: Mapping[str, SyncRule], provider: str) -> None:
    """SyncError unless each incremental stream suits the source's provider:
    a file stream names no cursor (it is read by object), any other names
    its cursor column. Known from the source connection alone, before any
    catalog: checked when a pipeline is created or updated."""
    for stream, rule in sorted(rules.items()):
        if provider in BY_OBJECT and rule.cursor:
            raise SyncError(_no_cursor_on_objects(stream))
        if provider not in BY_OBJECT and not rule.cursor:
            raise SyncError(
                f"spec.{SYNC_KEY}.{stream}.cursor: required for an incremental stream of a "
                f"{provider} source (a column name); only a file source is incremental "
                f"without one (by object)"
            )


def object_window(rule: SyncRule, stream: Stream, saved: str | None, now: str) -> Since:
    """A file stream's read: everything when any of its objects is new or
    changed since the saved state (a file is read whole), nothing otherwise.
    A cursor is refused at create time (`check_provider`); here too, for a
    pipeline whose source connection became a file one since."""
    if rule.cursor:
        raise ConfigError(_no_cursor_on_objects(stream.name))
    before, after = objects_of(saved), objects_of(now)
    unchanged = saved is not None and all(before.get(n) == sig for n, sig in after.items())
    return Since(OBJECT_COLUMN, OBJECTS, saved, high=now, empty=unchanged)


def parse_sync(doc: Mapping[str, Any] | None) -> dict[str, SyncRule]:
    """The incremental streams a spec names (stream or "*" → rule)."""
    raw = (doc or {}).get(SYNC_KEY)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SyncError(f"spec.{SYNC_KEY}: must be an object of stream name to sync mode")
    rules: dict[str, SyncRule] = {}
    for stream, value in raw.items():
        rule = _rule(value, f"spec.{SYNC_KEY}.{stream}")
        if rule is not None:
            rules[str(stream)] = rule
    return rules


def _rule(value: Any, path: str) -> SyncRule | None:
    if value == FULL:
        return None
    if value == INCREMENTAL:
        return SyncRule("")
    if not isinstance(value, Mapping):
        raise SyncError(f"{path}: expected 'full' or {{mode: incremental, cursor: …}}")
    unknown = set(value) - {"mode", "cursor", "lookback"}
    if unknown:
        raise SyncError(f"{path}: unknown field {sorted(unknown)[0]!r}")
    mode = value.get("mode", INCREMENTAL)
    if mode == FULL:
        return None
    if mode != INCREMENTAL:
        raise SyncError(f"{path}.mode: 'full' or 'incremental', not {mode!r}")
    cursor = value.get("cursor", "")
    if not isinstance(cursor, str) or (not cursor.strip() and "cursor" in value):
        raise SyncError(f"{path}.cursor: a column name (omit it for a file stream)")
    return SyncRule(cursor, _lookback(value.get("lookback", 0), f"{path}.lookback"))


def _lookback(value: Any, path: str) -> float:
    if isinstance(value, bool):
        raise SyncError(f"{path}: a number, or a duration like '15m', '2h', '1d'")
    if isinstance(value, int | float):
        if value < 0:
            raise SyncError(f"{path}: must not be negative")
        return float(value)
    match = _LOOKBACK.match(value) if isinstance(value, str) else None
    if match is None:
        raise SyncError(f"{path}: a number, or a duration like '15m', '2h', '1d'")
    return float(match.group(1)) * _UNITS[match.group(2)]


def rule_for(rules: Mapping[str, SyncRule], stream: Stream) -> SyncRule | None:
    for name in (f"{stream.namespace}.{stream.name}", stream.name, ALL_STREAMS):
        if name in rules:
            return rules[name]
    return None


def as_planned(rules: Mapping[str, SyncRule], stream: Stream) -> Stream:
    """The stream as a plan made before any run sees it: its cursor named
    (a `dedupe` without `order_by` follows it), no window read yet."""
    rule = rule_for(rules, stream)
    if rule is None or not rule.cursor:
        return stream
    column = cursor_column(stream, rule)
    return dataclasses.replace(stream, since=Since(rule.cursor, column.type))


def cursor_column(stream: Stream, rule: SyncRule) -> Column:
    """The stream's cursor column; ConfigError naming stream and key otherwise."""
    path = f"spec.{SYNC_KEY}.{stream.name}.cursor"
    if not rule.cursor:
        raise ConfigError(
            f"{path}: required for an incremental stream of a table (a column name); only "
            f"a file stream is incremental without one (by object)"
        )
    for column in stream.columns:
        if column.name == rule.cursor:
            if column.type not in ORDERABLE:
                raise ConfigError(
                    f"{path}: column {rule.cursor!r} of stream {stream.name} has type "
                    f"{column.type}, which a cursor cannot follow (use a number, date, "
                    f"timestamp or text column)"
                )
            return column
    has = ", ".join(stream.column_names)
    raise ConfigError(f"{path}: stream {stream.name} has no column {rule.cursor!r} (it has: {has})")


def check(
    rules: Mapping[str, SyncRule],
    streams: Sequence[Stream],
    merge: bool,
    overwrite: bool = False,
) -> None:
    """Every incremental stream's cursor exists and orders; merge is refused:
    a cursor never sees a delete, so a merge would delete every row it did
    not read."""
    for stream in streams:
        rule = rule_for(rules, stream)
        if rule is None:
            continue
        if merge:
            raise ConfigError(
                f"spec.{SYNC_KEY}.{stream.name}: write_mode merge needs a full sync (an "
                f"incremental read does not see deletes); use upsert or append"
            )
        if overwrite and rule.cursor:
            raise ConfigError(
                f"spec.{SYNC_KEY}.{stream.name}: write_mode overwrite needs a full sync (it "
                f"would replace the table with the rows of one delta); use upsert or append"
            )
        if rule.cursor:  # none: a file stream (by object; `check_provider` checks which)
            cursor_column(stream, rule)


def since(rule: SyncRule, column: Column, saved: str | None, inclusive: bool = True) -> Since:
    """The window of a read, given the stream's saved cursor (None: first)."""
    if saved is None:
        return Since(rule.cursor, column.type)
    low = _minus(saved, column.type, rule.lookback)
    return Since(rule.cursor, column.type, low, inclusive=inclusive)


def _minus(saved: str, sql_type: str, lookback: float) -> str:
    if not lookback:
        return saved
    if sql_type in INTEGERS:
        return str(int(saved) - int(lookback))
    if sql_type in NUMBERS:
        return str(Decimal(saved) - Decimal(str(lookback)))
    if sql_type == "date":
        return (date.fromisoformat(saved) - timedelta(seconds=lookback)).isoformat()
    if sql_type in TEMPORAL:
        moment = datetime.fromisoformat(saved.replace(" ", "T"))
        return (moment - timedelta(seconds=lookback)).isoformat(sep=" ")
    # A text cursor has no distance: the lookback cannot apply.
    return saved


def as_text(value: Any) -> str | None:
    """A cursor value as the state keeps it (ISO text for times)."""
    if value is None:
        return None
    if isinstance(value, datetime | date):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    return str(value)


@runtime_checkable
class CursorSource(Protocol):
    """A source that reads a stream from a cursor (postgres, sqlite)."""

    async def cursor_high(self, stream: Stream) -> tuple[str | None, int]: ...


@runtime_checkable
class ObjectSource(Protocol):
    """A source whose streams are objects (files): incremental by object."""

    async def objects(self, stream: Stream) -> dict[str, tuple[str, str]]: ...


@dataclass(frozen=True)
class Delta:
    """A stream as this run reads it: `rows` is exact for an incremental
    stream (a count with the cursor predicate), None for a full one."""

    stream: Stream
    rows: int | None = None


async def windows(
    source: object,
    streams: Sequence[Stream],
    spec: Mapping[str, Any] | None,
    saved: Mapping[str, str],
    mode: str,
) -> list[Delta]:
    """Each stream with its read window: incremental ones bounded above by
    the highest cursor value present now, and counted, so the run can size
    its delta and the state can advance to exactly what was read. Under
    append the saved value itself is excluded (a tie re-read would be a
    duplicate); under upsert it is re-read and applied once. A file stream
    (by object) whose file has not changed since the saved state is left
    out: the run neither reads nor loads it (an overwrite keeps its table)."""
    try:
        rules = parse_sync(spec)
    except SyncError as exc:
        raise ConfigError(str(exc)) from None
    check(rules, streams, merge=mode == "merge", overwrite=mode == "overwrite")
    inclusive = mode != "append"
    out: list[Delta] = []
    for stream in streams:
        rule = rule_for(rules, stream)
        if rule is None:
            out.append(Delta(stream))
            continue
        increments = capabilities_of(source).increments
        if increments == "object":
            now = object_mark(await cast(ObjectSource, source).objects(stream))
            window = object_window(rule, stream, saved.get(qualified(stream)), now)
            if not window.empty:  # an unchanged file is not part of the run at all
                out.append(Delta(dataclasses.replace(stream, since=window)))
            continue
        if increments != "cursor":
            raise ConfigError(
                f"spec.{SYNC_KEY}.{stream.name}: this source cannot read incrementally "
                f"by a cursor column"
            )
        column = cursor_column(stream, rule)
        window = since(rule, column, saved.get(qualified(stream)), inclusive)
        bounded = dataclasses.replace(stream, since=window)
        high, rows = await cast(CursorSource, source).cursor_high(bounded)
        window = dataclasses.replace(window, high=high, empty=high is None)
        out.append(Delta(dataclasses.replace(stream, since=window), rows))
    return out
