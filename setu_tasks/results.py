"""What a runtime reports when a task succeeds: one typed result per task
kind, made by the handler and read as it is by the server's outcomes.

Results cross two edges. Over gRPC (an agent's CompleteTask) they travel as
the `CompleteTaskRequest.result` oneof, converted both ways by one codec
(setu_tasks/codec/agents.py, one writer and one reader per kind). Into the
database (the task's result, and the job's for kinds whose success ends it)
they travel as JSON, converted here: `to_json` writes, `result_from_json`
reads back and refuses a field it does not know, or one that is missing or
of the wrong type (MalformedResult, INVALID_ARGUMENT), so a misspelt key
fails loudly instead of vanishing. `validate` checks the values (names
present, counts not negative) wherever a result enters the server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, ClassVar

from setu_engine.kinds import RowChanges
from setu_engine.planning.incremental import MARK_TYPES

# A result carries a dry run's plan (setu_engine/planning/plans.py) and is refused with
# the engine's strict reader's error, which is re-exported for the callers of results.
from setu_engine.planning.plans import (
    PlannedStream,
    SampleCheck,
    SampleFault,
    incompatibilities,
    plans_from_json,
)
from setu_engine.staged.staging import MANIFEST, Manifest
from setu_engine.values.strict_json import MalformedResult as MalformedResult
from setu_engine.values.strict_json import an_object as _fields_any
from setu_engine.values.strict_json import check as _check
from setu_engine.values.strict_json import columns as _columns
from setu_engine.values.strict_json import fields as _fields
from setu_engine.values.strict_json import strings as _strings
from setu_engine.values.types import Column, Stream
from setu_engine.values.window import CursorMark


@dataclass(frozen=True)
class ArtifactStream:
    """One stream an extract staged."""

    stream: str
    rows: int
    parts: tuple[str, ...]
    checksum: str


@dataclass(frozen=True)
class Artifact:
    """What an extract staged: one manifest under the run's prefix."""

    blob_prefix: str
    streams: tuple[ArtifactStream, ...]
    manifest_path: str = MANIFEST

    @classmethod
    def of(cls, blob_prefix: str, manifest: Manifest) -> Artifact:
        return cls(
            blob_prefix,
            tuple(
                ArtifactStream(s.name, s.rows, tuple(p.path for p in s.parts), s.checksum)
                for s in manifest.streams
            ),
        )

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.streams)


# Timeline lines an extract result may carry for one stream.
NOTES_PER_STREAM = 3


@dataclass(frozen=True)
class ExtractResult:
    kind: ClassVar[str] = "extract"
    artifact: Artifact
    rows_extracted: int
    # (stream, message): what the extract read of each incremental stream
    # (setu_engine/planning/incremental.py `window_note`), one job event each.
    notes: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": self.kind,
            "artifact": {
                "blob_prefix": self.artifact.blob_prefix,
                "manifest_path": self.artifact.manifest_path,
                "streams": [
                    {
                        "stream": s.stream,
                        "rows": s.rows,
                        "parts": list(s.parts),
                        "checksum": s.checksum,
                    }
                    for s in self.artifact.streams
                ],
            },
            "rows_extracted": self.rows_extracted,
        }
        if self.notes:
            body["notes"] = [{"stream": s, "message": m} for s, m in self.notes]
        return body

    def validate(self) -> None:
        artifact = self.artifact
        _present(artifact.blob_prefix, "extract result: artifact.blob_prefix")
        _present(artifact.manifest_path, "extract result: artifact.manifest_path")
        for staged in artifact.streams:
            _present(staged.stream, "extract result: a staged stream's name")
            _counted(staged.rows, f"extract result: rows of {staged.stream}")
        _counted(self.rows_extracted, "extract result: rows_extracted")
        # A few per staged stream (its window, where it resumed, what it
        # read): a result cannot flood a timeline.
        room = dict.fromkeys((s.stream for s in artifact.streams), NOTES_PER_STREAM)
        for stream, _ in self.notes:
            if not room.get(stream):
                raise MalformedResult(
                    f"extract result: a note on {stream!r}, which it did not stage"
                    f" or noted more than {NOTES_PER_STREAM} times"
                )
            room[stream] -= 1

    @classmethod
    def from_json(cls, data: Any) -> ExtractResult:
        body = _fields(
            data, "extract result", {"notes": list}, kind=str, artifact=dict, rows_extracted=int
        )
        artifact = _fields(
            body["artifact"], "artifact", blob_prefix=str, manifest_path=str, streams=list
        )
        streams = []
        for item in artifact["streams"]:
            s = _fields(item, "artifact stream", stream=str, rows=int, parts=list, checksum=str)
            streams.append(
                ArtifactStream(s["stream"], s["rows"], _strings(s["parts"], "parts"), s["checksum"])
            )
        said = (_fields(i, "extract note", stream=str, message=str) for i in body.get("notes", []))
        return cls(
            Artifact(artifact["blob_prefix"], tuple(streams), artifact["manifest_path"]),
            body["rows_extracted"],
            tuple((n["stream"], n["message"]) for n in said),
        )


@dataclass(frozen=True)
class LoadResult:
    kind: ClassVar[str] = "load"
    rows_loaded: int
    rows_by_stream: Mapping[str, int] = field(default_factory=dict)
    # Per stream, what its rows did, where the destination tells.
    changes_by_stream: Mapping[str, RowChanges] = field(default_factory=dict)
    # A dry run's load wrote nothing: `planned` is what it would do.
    dry_run: bool = False
    planned: tuple[PlannedStream, ...] = ()
    # (stream, message): what the load changed ahead of its rows.
    notes: tuple[tuple[str, str], ...] = ()
    # Per incremental stream, the highest cursor value loaded: its saved
    # state advances to it with this result (setu_engine/planning/incremental.py).
    cursors_by_stream: Mapping[str, CursorMark] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body = {
            "kind": self.kind,
            "rows_loaded": self.rows_loaded,
            "rows_by_stream": dict(self.rows_by_stream),
        }
        if self.cursors_by_stream:
            body["cursors_by_stream"] = {s: c.to_dict() for s, c in self.cursors_by_stream.items()}
        if self.changes_by_stream:
            body["changes_by_stream"] = {
                stream: changes_json(c) for stream, c in self.changes_by_stream.items()
            }
        if self.dry_run:
            body["dry_run"] = True
            body["planned"] = [p.to_json() for p in self.planned]
        if self.notes:
            body["notes"] = [{"stream": s, "message": m} for s, m in self.notes]
        return body

    def validate(self) -> None:
        _counted(self.rows_loaded, "load result: rows_loaded")
        for stream, rows in self.rows_by_stream.items():
            _present(stream, "load result: a stream's name")
            _counted(rows, f"load result: rows of {stream}")
        for stream, changes in self.changes_by_stream.items():
            if stream not in self.rows_by_stream:
                raise MalformedResult(f"load result: changes of {stream!r}, which it did not load")
            check_changes(changes, f"load result: changes of {stream}")
        for stream, cursor in self.cursors_by_stream.items():
            if stream not in self.rows_by_stream:
                raise MalformedResult(f"load result: cursor of {stream!r}, which it did not load")
            if cursor.type not in MARK_TYPES or not cursor.column or not cursor.value:
                raise MalformedResult(f"load result: cursor of {stream!r} is not a cursor")

    @classmethod
    def from_json(cls, data: Any) -> LoadResult:
        optional = {
            "changes_by_stream": dict,
            "dry_run": bool,
            "planned": list,
            "notes": list,
            "cursors_by_stream": dict,
        }
        body = _fields(
            data, "load result", optional, kind=str, rows_loaded=int, rows_by_stream=dict
        )
        by_stream = body["rows_by_stream"]
        for stream, rows in by_stream.items():
            _check(rows, int, f"rows_by_stream[{stream!r}]")
        changes = {
            stream: changes_from_json(c, f"changes_by_stream[{stream!r}]")
            for stream, c in body.get("changes_by_stream", {}).items()
        }
        said = (_fields(i, "load note", stream=str, message=str) for i in body.get("notes", []))
        notes = tuple((n["stream"], n["message"]) for n in said)
        return cls(
            body["rows_loaded"],
            dict(by_stream),
            changes,
            body.get("dry_run", False),
            plans_from_json(body.get("planned", []), "planned"),
            notes,
            _cursors(body.get("cursors_by_stream", {})),
        )


def _cursors(data: Mapping[str, Any]) -> dict[str, CursorMark]:
    out: dict[str, CursorMark] = {}
    for stream, raw in data.items():
        said = _fields(raw, f"cursors_by_stream[{stream!r}]", column=str, type=str, value=str)
        out[stream] = CursorMark(said["column"], said["type"], said["value"])
    return out


def changes_json(changes: RowChanges) -> dict[str, int]:
    body = {
        "inserted": changes.inserted,
        "updated": changes.updated,
        "unchanged": changes.unchanged,
    }
    if changes.deleted:  # a merge's only
        body["deleted"] = changes.deleted
    return body


def changes_from_json(data: Any, what: str) -> RowChanges:
    body = _fields(data, what, {"deleted": int}, inserted=int, updated=int, unchanged=int)
    return RowChanges(body["inserted"], body["updated"], body["unchanged"], body.get("deleted", 0))


def changes_said(changes: RowChanges | None) -> str:
    """A load's changes in a timeline's words: " (3 inserted, 1 updated, 96 unchanged)"."""
    if changes is None:
        return ""
    deleted = f", {changes.deleted} deleted" if changes.deleted else ""
    return (
        f" ({changes.inserted} inserted, {changes.updated} updated, "
        f"{changes.unchanged} unchanged{deleted})"
    )


def check_changes(changes: RowChanges, what: str) -> None:
    """RowChanges fit to record: no count negative."""
    for name in ("inserted", "updated", "unchanged", "deleted"):
        _counted(getattr(changes, name), f"{what}: {name}")


@dataclass(frozen=True)
class TestResult:
    __test__: ClassVar[bool] = False  # not a pytest class, despite its name
    kind: ClassVar[str] = "test"
    ok: bool
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "ok": self.ok, "message": self.message}

    def validate(self) -> None:
        return None

    @classmethod
    def from_json(cls, data: Any) -> TestResult:
        body = _fields(data, "test result", kind=str, ok=bool, message=str)
        return cls(body["ok"], body["message"])


@dataclass(frozen=True)
class DiscoverResult:
    kind: ClassVar[str] = "discover"
    streams: tuple[Stream, ...]
    # A dry run's discover on the source's agent: per stream (qualified
    # name), what a sample of its rows met (setu_engine/movement/dry_run.py).
    samples: Mapping[str, SampleCheck] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": self.kind, "streams": [s.to_dict() for s in self.streams]}
        if self.samples:
            body["samples"] = {name: c.to_json() for name, c in self.samples.items()}
        return body

    def validate(self) -> None:
        for stream in self.streams:
            _present(stream.name, "discover result: a stream's name")
            _check_columns(stream.columns, f"discover result: stream {stream.name}")

    @classmethod
    def from_json(cls, data: Any) -> DiscoverResult:
        body = _fields(data, "discover result", {"samples": dict}, kind=str, streams=list)
        streams = []
        for item in body["streams"]:
            s = _fields(
                item,
                "stream",
                namespace=str,
                name=str,
                columns=list,
                primary_key=list,
                row_estimate=int,
            )
            streams.append(
                Stream(
                    name=s["name"],
                    columns=_columns(s["columns"]),
                    namespace=s["namespace"],
                    primary_key=_strings(s["primary_key"], "primary_key"),
                    row_estimate=s["row_estimate"],
                )
            )
        samples = {str(k): SampleCheck.from_json(v) for k, v in body.get("samples", {}).items()}
        return cls(tuple(streams), samples)


@dataclass(frozen=True)
class PreviewResult:
    kind: ClassVar[str] = "preview"
    columns: tuple[Column, ...]
    # The sample itself: one JSON object per row, keyed by column name.
    rows: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "columns": [c.to_dict() for c in self.columns],
            "rows": [dict(r) for r in self.rows],
        }

    def validate(self) -> None:
        _check_columns(self.columns, "preview result")

    @classmethod
    def from_json(cls, data: Any) -> PreviewResult:
        body = _fields(data, "preview result", kind=str, columns=list, rows=list)
        rows = tuple(_fields_any(r, "preview row") for r in body["rows"])
        return cls(_columns(body["columns"]), rows)


class MigrateMode(StrEnum):
    STAGED = "staged"
    DIRECT = "direct"
    # cloud → agent: the cloud staged; the load goes on at the destination's agent.
    HANDOFF = "handoff"
    DRY_RUN = "dry_run"
    # The run had ended before the task started: nothing was done.
    SKIPPED = "skipped"


@dataclass(frozen=True)
class StreamCounts:
    stream: str
    rows_extracted: int
    rows_loaded: int


@dataclass(frozen=True)
class MigrateResult:
    """The cloud's part of a run, reported by a cloud worker."""

    kind: ClassVar[str] = "migrate"
    mode: MigrateMode
    rows_extracted: int = 0
    rows_loaded: int = 0
    streams: tuple[StreamCounts, ...] = ()
    planned: tuple[PlannedStream, ...] = ()
    # Why a skipped task did nothing.
    reason: str = ""

    @property
    def hands_off(self) -> bool:
        return self.mode is MigrateMode.HANDOFF

    def validate(self) -> None:
        _counted(self.rows_extracted, "migrate result: rows_extracted")
        _counted(self.rows_loaded, "migrate result: rows_loaded")

    def to_json(self) -> dict[str, Any]:
        if self.mode is MigrateMode.SKIPPED:
            return {"kind": self.kind, "skipped": self.reason}
        if self.mode is MigrateMode.HANDOFF:
            return {"kind": self.kind, "handoff": "load", "rows_extracted": self.rows_extracted}
        if self.mode is MigrateMode.DRY_RUN:
            return {
                "kind": self.kind,
                "dry_run": True,
                "streams": [p.to_json() for p in self.planned],
                "incompatibilities": list(incompatibilities(self.planned)),
            }
        return {
            "kind": self.kind,
            "mode": self.mode.value,
            "rows_extracted": self.rows_extracted,
            "rows_loaded": self.rows_loaded,
            "streams": [
                {
                    "stream": s.stream,
                    "rows_extracted": s.rows_extracted,
                    "rows_loaded": s.rows_loaded,
                }
                for s in self.streams
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> MigrateResult:
        keys = set(data) if isinstance(data, Mapping) else set()
        if "skipped" in keys:
            body = _fields(data, "migrate result", kind=str, skipped=str)
            return cls(MigrateMode.SKIPPED, reason=body["skipped"])
        if "handoff" in keys:
            body = _fields(data, "migrate result", kind=str, handoff=str, rows_extracted=int)
            return cls(MigrateMode.HANDOFF, rows_extracted=body["rows_extracted"])
        if "dry_run" in keys:
            body = _fields(
                data,
                "migrate result",
                {"incompatibilities": list},
                kind=str,
                dry_run=bool,
                streams=list,
            )
            return cls(MigrateMode.DRY_RUN, planned=plans_from_json(body["streams"], "streams"))
        body = _fields(
            data,
            "migrate result",
            kind=str,
            mode=str,
            rows_extracted=int,
            rows_loaded=int,
            streams=list,
        )
        if body["mode"] not in (MigrateMode.STAGED, MigrateMode.DIRECT):
            raise MalformedResult(f"migrate result: mode {body['mode']!r} is not staged or direct")
        streams = []
        for item in body["streams"]:
            s = _fields(item, "stream counts", stream=str, rows_extracted=int, rows_loaded=int)
            streams.append(StreamCounts(s["stream"], s["rows_extracted"], s["rows_loaded"]))
        return cls(
            MigrateMode(body["mode"]),
            rows_extracted=body["rows_extracted"],
            rows_loaded=body["rows_loaded"],
            streams=tuple(streams),
        )


TaskResult = (
    ExtractResult | LoadResult | MigrateResult | TestResult | DiscoverResult | PreviewResult
)

RESULT_TYPES: dict[str, type[TaskResult]] = {
    t.kind: t
    for t in (ExtractResult, LoadResult, MigrateResult, TestResult, DiscoverResult, PreviewResult)
}


def result_from_json(data: Any) -> TaskResult:
    """A result from its JSON form; MalformedResult when it has not exactly
    the shape of the kind it names."""
    if not isinstance(data, Mapping) or not isinstance(data.get("kind"), str):
        raise MalformedResult("a task result names its kind")
    kind = data["kind"]
    if kind not in RESULT_TYPES:
        raise MalformedResult(f"no task kind {kind!r}; known: {', '.join(sorted(RESULT_TYPES))}")
    result = RESULT_TYPES[kind].from_json(data)
    result.validate()
    return result


def check_result(kind: str, result: object) -> TaskResult:
    """`result` when it is the result of a `kind` task, else MalformedResult
    (a handler that returned a dict, or another kind's result)."""
    expected = RESULT_TYPES.get(kind)
    if expected is None or not isinstance(result, expected):
        wanted = expected.__name__ if expected else f"a result of kind {kind!r}"
        raise MalformedResult(
            f"a {kind} task must end with a {wanted}, not {type(result).__name__}"
        )
    return result


def redacted(result: TaskResult, redact: Callable[[str], str]) -> TaskResult:
    """The result with its free text redacted. Only free text: names and
    data (a stream called like a database user) must reach the server as
    they are."""
    if isinstance(result, TestResult):
        return replace(result, message=redact(result.message))
    if isinstance(result, DiscoverResult) and result.samples:
        samples = {n: _redacted_sample(c, redact) for n, c in result.samples.items()}
        return replace(result, samples=samples)
    if isinstance(result, LoadResult | MigrateResult) and result.planned:
        return replace(result, planned=_redacted_plan(result.planned, redact))
    return result


def _redacted_plan(
    planned: tuple[PlannedStream, ...], redact: Callable[[str], str]
) -> tuple[PlannedStream, ...]:
    """A plan's free text: its reasons, and what a sample quotes of a value."""
    return tuple(
        replace(
            p,
            incompatibilities=tuple(redact(i) for i in p.incompatibilities),
            sample=None if p.sample is None else _redacted_sample(p.sample, redact),
        )
        for p in planned
    )


def _redacted_sample(check: SampleCheck, redact: Callable[[str], str]) -> SampleCheck:
    fault = check.fault
    if fault is None:
        return check
    quoted = SampleFault(
        fault.column, fault.row, redact(fault.value), fault.declared_type, redact(fault.error)
    )
    return replace(check, fault=quoted)


# -- value checks


def _present(value: str, what: str) -> None:
    if not value:
        raise MalformedResult(f"{what} is missing")


def _counted(value: int, what: str) -> None:
    if value < 0:
        raise MalformedResult(f"{what} is negative ({value})")


def _check_columns(columns: tuple[Column, ...], what: str) -> None:
    for column in columns:
        _present(column.name, f"{what}: a column's name")
        _present(column.type, f"{what}: the type of column {column.name}")
