"""How setu's client commands show things: aligned tables, key: value
blocks for a connection, pipeline or job, enum and timestamp formatting, the
JSON documents of --json, and the live progress line of a followed job.

Separate from the command modules (objects.py, jobs.py, state.py, …), which
parse arguments and call the server: this module only turns the SDK's values
into text, so the output format can be read and changed in one place.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from setu_client import (
    DryRunPlan,
    EventLevel,
    Job,
    JobKind,
    JobOutputs,
    JobState,
    Phase,
    Placement,
    PlannedStream,
    SampleCheck,
    WriteMode,
    message_to_dict,
    struct_to_dict,
)
from setu_client.messages import Connection, Pipeline

# ---------------------------------------------------------------- rendering


def enum_name(value: enum.Enum) -> str:
    """JobState.SUCCEEDED → succeeded; UNSPECIFIED → -."""
    return "-" if value.name == "UNSPECIFIED" else value.name.lower()


def when(value: datetime | timestamp_pb2.Timestamp | None) -> str:
    """UTC to the second; "-" when unset."""
    if isinstance(value, timestamp_pb2.Timestamp):
        value = value.ToDatetime(tzinfo=UTC) if value.seconds or value.nanos else None
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns aligned to their widest cell; the last one is left ragged."""
    lines = [list(headers), *(list(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def block(pairs: Iterable[tuple[str, str]]) -> str:
    pairs = list(pairs)
    width = max(len(k) for k, _ in pairs) + 1
    return "\n".join(f"{(k + ':').ljust(width)} {v}" for k, v in pairs)


# The JSON spelling of each enum: the wire's (JOB_STATE_SUCCEEDED), as the
# proto JSON of connections and pipelines spells theirs.
_WIRE_PREFIX: dict[type[enum.Enum], str] = {
    JobState: "JOB_STATE_",
    JobKind: "JOB_KIND_",
    Phase: "PHASE_",
    EventLevel: "EVENT_LEVEL_",
    Placement: "PLACEMENT_",
    WriteMode: "WRITE_MODE_",
}


def as_dict(value: Message | Any) -> Any:
    """A message or an SDK value as JSON values. Numbers that are whole are
    ints: Struct fields (a connection's config) carry every number as a
    double on the wire."""
    if isinstance(value, Message):
        return message_to_dict(value)
    if isinstance(value, enum.Enum):
        return _WIRE_PREFIX[type(value)] + value.name
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: as_dict(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if getattr(value, f.name) is not None
        }
    if isinstance(value, dict):
        return {k: as_dict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_dict(v) for v in value]
    return value


def emit(args: argparse.Namespace, document: Any, human: str) -> None:
    """One JSON document with --json, else the human text."""
    print(json.dumps(document, indent=2) if args.json else human)


def _phase_rows(job: Job) -> int:
    loading = job.phase in (Phase.LOAD, Phase.DIRECT)
    return job.progress.rows_loaded if loading else job.progress.rows_extracted


def progress_line(job: Job, rate: float | None, bar_width: int = 20) -> str:
    """One line of the live display: state, phase, rows, a bar once the total
    is known (for the current phase's counter), and the rate if measured."""
    p = job.progress
    total = f"/{p.rows_total:,}" if p.rows_total else ""
    loading = job.phase in (Phase.LOAD, Phase.DIRECT)
    parts = [
        f"{enum_name(job.state):<9}",
        f"{enum_name(job.phase):<7}",
        f"extracted {p.rows_extracted:,}{'' if loading else total}",
        f"loaded {p.rows_loaded:,}{total if loading else ''}",
    ]
    if p.rows_total:
        fraction = min(_phase_rows(job) / p.rows_total, 1.0)
        filled = round(fraction * bar_width)
        parts.append(f"[{'#' * filled}{'-' * (bar_width - filled)}] {fraction:4.0%}")
    if rate is not None:
        parts.append(f"{rate:,.0f} rows/s")
    return "  ".join(parts)


@dataclass
class RateMeter:
    """Rows per second in the current phase, since its first snapshot."""

    _phase: Phase | None = None
    _rows: int = 0
    _since: float = 0.0

    def rate(self, job: Job, now: float) -> float | None:
        rows = _phase_rows(job)
        if job.phase == Phase.UNSPECIFIED:
            return None  # not moving rows yet
        if job.phase != self._phase:
            self._phase, self._rows, self._since = job.phase, rows, now
            return None
        elapsed = now - self._since
        return (rows - self._rows) / elapsed if elapsed > 0 else None


@dataclass
class ProgressDisplay:
    """On a terminal one line redrawn in place; elsewhere a line per visible
    change, so logs stay readable."""

    out: TextIO
    tty: bool
    clock: Callable[[], float] = time.monotonic  # the rate only: UI, not logic
    _meter: RateMeter = field(default_factory=RateMeter)
    _width: int = 0
    _last: str = ""

    def show(self, job: Job) -> None:
        line = progress_line(job, self._meter.rate(job, self.clock()))
        if self.tty:
            self.out.write("\r" + line.ljust(self._width))
            self._width = max(self._width, len(line))
        elif progress_line(job, None) != self._last:
            self.out.write(line + "\n")
        self._last = progress_line(job, None)
        self.out.flush()

    def close(self) -> None:
        if self.tty and self._width:
            self.out.write("\r" + " " * self._width + "\r")
            self.out.flush()


# ---------------------------------------------------------------- blocks


def _json(values: Any) -> str:
    return json.dumps(values, sort_keys=True)


def connection_block(c: Connection) -> str:
    return block(
        [
            ("id", c.id),
            ("name", c.name),
            ("provider", c.provider),
            ("placement", enum_name(Placement(c.placement))),
            ("agent_id", c.agent_id or "-"),
            ("config", _json(struct_to_dict(c.config))),
            ("created_at", when(c.created_at)),
            ("updated_at", when(c.updated_at)),
        ]
    )


def pipeline_block(p: Pipeline, names: dict[str, str]) -> str:
    """`names` maps connection ids to names, for the source and destination."""
    return block(
        [
            ("id", p.id),
            ("name", p.name),
            ("source", names.get(p.source_connection_id, p.source_connection_id)),
            ("destination", names.get(p.destination_connection_id, p.destination_connection_id)),
            ("streams", ", ".join(p.streams) or "(all)"),
            ("write_mode", enum_name(WriteMode(p.write_mode))),
            ("schedule", p.schedule or "-"),
            ("paused", str(p.paused).lower()),
            ("spec", _json(struct_to_dict(p.spec))),
            ("next_run_at", when(p.next_run_at)),
            ("created_at", when(p.created_at)),
        ]
    )


def job_state(j: Job) -> str:
    return enum_name(j.state)


def stage_runtimes(j: Job) -> tuple[str, str]:
    """Where extract and load ran as people read it: "cloud", "agent edge-1"
    (the server's label, with the short id when two agents share the name);
    the bare runtime from a server that sends no label; "-" before it ran."""
    return (
        j.extract_runtime_label or j.extract_runtime or "-",
        j.load_runtime_label or j.load_runtime or "-",
    )


def job_runtimes(j: Job) -> str:
    """Both stages in one cell of `jobs list`: "cloud", "agent edge-1 → cloud"."""
    extract, load = stage_runtimes(j)
    return extract if extract == load else f"{extract} → {load}"


def job_block(j: Job) -> str:
    p = j.progress
    pairs = [
        ("id", j.id),
        ("state", job_state(j) + (" (cancel requested)" if j.cancel_requested else "")),
        ("kind", enum_name(j.kind)),
        ("pipeline_id", j.pipeline_id or "-"),
        ("phase", enum_name(j.phase)),
        ("dry_run", str(j.dry_run).lower()),
        (
            "rows",
            f"extracted {p.rows_extracted:,}, loaded {p.rows_loaded:,}, total {p.rows_total:,}",
        ),
        ("runtimes", "extract {}, load {}".format(*stage_runtimes(j))),
        ("created_at", when(j.created_at)),
        ("started_at", when(j.started_at)),
        ("finished_at", when(j.finished_at)),
    ]
    if j.started_at and j.finished_at:
        took = j.finished_at - j.started_at
        pairs.append(("duration", f"{took.total_seconds():.1f}s"))
    plan = j.plan
    if j.result and plan is None:
        pairs.append(("result", _json(j.result)))
    if j.error_message and plan is None:
        pairs.append(("error", j.error_message))
    return block(pairs) + (f"\n\n{plan_text(plan)}" if plan is not None else "")


def plan_text(plan: DryRunPlan) -> str:
    """A dry run's plan, stream by stream: where it lands and how, its
    columns after the operator chain, and what would stop the run."""
    parts = [_stream_plan(s) for s in plan.streams] or ["plan: the source offers no streams"]
    problems = plan.incompatibilities
    verdict = (
        f"the run would fail ({len(problems)} incompatibilit{'y' if len(problems) == 1 else 'ies'})"
        if problems
        else "nothing would stop the run; nothing was written"
    )
    return "\n\n".join([*parts, f"dry run: {verdict}"])


def _stream_plan(s: PlannedStream) -> str:
    lines = [f"stream {s.stream} → {s.destination}  (about {s.rows_estimate:,} rows)"]
    lines += [f"  {action}" for action in s.actions]
    if s.key:
        lines.append(f"  key: {', '.join(s.key)}")
    if s.columns:
        rows = [
            (
                f"    {c.source or '(computed)'}",
                "→",
                c.column,
                c.type,
                c.destination_type or "(new)",
            )
            for c in s.columns
        ]
        lines.append(table(("    SOURCE", "", "COLUMN", "TYPE", "DESTINATION"), rows))
    if s.sample is not None:
        lines += _sample_lines(s.stream, s.sample)
    lines += [f"  ✗ {problem}" for problem in s.incompatibilities]
    return "\n".join(lines)


def _sample_lines(stream: str, check: SampleCheck) -> list[str]:
    """What the dry run checked of the stream's rows, said as a sample: a
    clean one is no promise for the rows after it."""
    head = f"  checked the first {check.rows:,} rows of {stream}"
    if check.cut:
        head += f" (the sample's {check.cut} bound stopped it)"
    elif check.rows < check.limit:
        head += " (the stream had no more)"
    fault = check.fault
    if fault is None:
        return [f"{head}: every value fits"]
    where = f"column {fault.column}" if fault.column else "a row"
    declared = f" (declared {fault.declared_type})" if fault.declared_type else ""
    return [
        f"{head}: row {fault.row} would fail the run",
        f"    {where}{declared}, value {fault.value}",
    ]


def outputs_table(outputs: JobOutputs) -> str:
    rows = [
        (
            s.stream,
            f"{s.rows_extracted:,}",
            f"{s.rows_loaded:,}",
            *(_count(n) for n in (s.inserted, s.updated, s.unchanged)),
            s.checksum or "-",
        )
        for s in outputs.streams
    ]
    header = ("STREAM", "EXTRACTED", "LOADED", "INSERTED", "UPDATED", "UNCHANGED", "CHECKSUM")
    return table(header, rows) if rows else "no outputs"


def _count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"
