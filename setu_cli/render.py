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
import io
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

import setu_client as sdk

if TYPE_CHECKING:
    from google.protobuf import timestamp_pb2
    from google.protobuf.message import Message

    from setu_client import DryRunPlan, Job, JobOutputs, PlannedStream, Progress, SampleCheck
    from setu_client.messages import Connection, Pipeline

# ---------------------------------------------------------------- rendering


def enum_name(value: enum.Enum) -> str:
    """JobState.SUCCEEDED → succeeded; UNSPECIFIED → -."""
    return "-" if value.name == "UNSPECIFIED" else value.name.lower()


def when(value: datetime | timestamp_pb2.Timestamp | None) -> str:
    """UTC to the second; "-" when unset."""
    # protobuf here, as in as_dict: building the parser imports none of it.
    from google.protobuf import timestamp_pb2

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
# By the enum's class name: the classes are the SDK's, imported when a
# command runs rather than when the parser is built.
_WIRE_PREFIX: dict[str, str] = {
    "JobState": "JOB_STATE_",
    "JobKind": "JOB_KIND_",
    "Phase": "PHASE_",
    "EventLevel": "EVENT_LEVEL_",
    "Placement": "PLACEMENT_",
    "WriteMode": "WRITE_MODE_",
}


def as_dict(value: Message | Any) -> Any:
    """A message or an SDK value as JSON values. Numbers that are whole are
    ints: Struct fields (a connection's config) carry every number as a
    double on the wire."""
    from google.protobuf.message import Message

    if isinstance(value, Message):
        return sdk.message_to_dict(value)
    if isinstance(value, enum.Enum):
        return _WIRE_PREFIX[type(value).__name__] + value.name
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


def moved_rows(job: Job) -> int:
    """Rows the current phase has moved: extracted while extracting; loaded
    plus filtered (the operator chain dropped them: done too) once loading."""
    p = job.progress
    if job.phase in (sdk.Phase.LOAD, sdk.Phase.DIRECT):
        return p.rows_loaded + p.rows_filtered
    return p.rows_extracted


def loaded_said(p: Progress, count: Callable[[int], str] = "{:,}".format) -> list[str]:
    """What the load did, in words that add up: `inserted 3`, `updated 1`,
    `unchanged 96` (the non-zero ones) where the destination told it for
    every loaded row, else `loaded N`; then `filtered N` (the operator chain
    dropped them) and `deleted N` (a merge), when there are any."""
    split = p.rows_inserted + p.rows_updated + p.rows_unchanged
    kinds = (
        ("inserted", p.rows_inserted),
        ("updated", p.rows_updated),
        ("unchanged", p.rows_unchanged),
    )
    if p.rows_loaded and split == p.rows_loaded:
        said = [f"{word} {count(n)}" for word, n in kinds if n]
    else:
        said = [f"loaded {count(p.rows_loaded)}"]
    if p.rows_filtered:
        said.append(f"filtered {count(p.rows_filtered)}")
    if p.rows_deleted:
        said.append(f"deleted {count(p.rows_deleted)}")
    return said


def duration(seconds: float) -> str:
    """0:07, 12:04, 1:02:03."""
    hours, rest = divmod(max(int(seconds), 0), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02}:{secs:02}" if hours else f"{minutes}:{secs:02}"


def compact(n: int) -> str:
    """1,250,000 → 1.2M; 8,000 → 8.0k; 950 → 950 (the narrow form)."""
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{n / size:.0f}{unit}" if n >= 100 * size else f"{n / size:.1f}{unit}"
    return str(n)


@dataclass(frozen=True)
class _Form:
    """What one form of the progress line shows (progress_line tries the
    fullest first)."""

    bar: int = 20
    rate: bool = False
    phase: bool = True
    compact: bool = False
    eta: bool = True
    elapsed: bool = True
    # Loading, the extracted count may go (the load's counts say the rest).
    extracted: bool = True


_FORMS = (
    _Form(rate=True),
    _Form(),
    _Form(bar=10),
    _Form(bar=0),
    _Form(bar=0, phase=False),
    _Form(bar=0, phase=False, compact=True),
    _Form(bar=0, phase=False, compact=True, eta=False),
    _Form(bar=0, phase=False, compact=True, eta=False, elapsed=False),
    _Form(bar=0, phase=False, compact=True, eta=False, elapsed=False, extracted=False),
)


def progress_line(
    job: Job, rate: float | None = None, *, width: int = 200, elapsed: float | None = None
) -> str:
    """One line of the live display, shorter than `width` (the last column
    stays free, so a terminal never wraps it): state, phase, rows (the total
    on the current phase's counter; what the load did, filtered rows named),
    a bar and % of what moved once the total is known, the elapsed time, an
    ETA once the total and a rate are, and the rate. Narrower, it drops the
    rate, shortens then drops the bar, drops the phase, writes counts as
    1.2M, drops the ETA and the elapsed time, in that order."""
    p = job.progress
    moved = moved_rows(job)
    fraction = min(moved / p.rows_total, 1.0) if p.rows_total else None
    eta = None
    if job.terminal:
        rate = None  # a finished job's line says what it did, not how fast
    elif p.rows_total and rate and rate > 0 and moved < p.rows_total:
        eta = (p.rows_total - moved) / rate
    line = ""
    for form in _FORMS:
        line = _drawn(job, form, fraction, rate, elapsed, eta)
        if len(line) < width:
            return line
    return line[: max(width - 1, 1)]


def _drawn(
    job: Job,
    form: _Form,
    fraction: float | None,
    rate: float | None,
    elapsed: float | None,
    eta: float | None,
) -> str:
    p = job.progress
    count: Callable[[int], str] = compact if form.compact else "{:,}".format
    total = f"/{count(p.rows_total)}" if p.rows_total else ""
    loading = job.phase in (sdk.Phase.LOAD, sdk.Phase.DIRECT)
    parts = [f"{enum_name(job.state):<9}"]
    if form.phase:
        parts.append(f"{enum_name(job.phase):<7}")
    said = loaded_said(p, count)
    # The total goes on the phase's counter; once the load's counts split
    # (inserted, filtered, …), on the extracted count they add up to.
    on_loaded = loading and said[0].startswith("loaded ")
    if form.extracted or not loading:
        parts.append(f"extracted {count(p.rows_extracted)}{'' if on_loaded else total}")
    if on_loaded:
        said[0] += total
    if loading or said != ["loaded 0"]:  # extracting, nothing loaded: room for the rest
        parts.append(", ".join(said))
    if fraction is not None:
        filled = round(fraction * form.bar)
        drawn = f"[{'#' * filled}{'-' * (form.bar - filled)}] " if form.bar else ""
        parts.append(f"{drawn}{fraction:.0%}")
    if elapsed is not None and form.elapsed:
        parts.append(duration(elapsed))
    if eta is not None and form.eta:
        parts.append(f"eta {duration(eta)}")
    if rate is not None and form.rate:
        parts.append(f"{rate:,.0f} rows/s")
    return "  ".join(parts)


@dataclass
class RateMeter:
    """Rows per second in the current phase, since its first snapshot."""

    _phase: sdk.Phase | None = None
    _rows: int = 0
    _since: float = 0.0

    def rate(self, job: Job, now: float) -> float | None:
        rows = moved_rows(job)
        if job.phase == sdk.Phase.UNSPECIFIED:
            return None  # not moving rows yet
        if job.phase != self._phase:
            self._phase, self._rows, self._since = job.phase, rows, now
            return None
        elapsed = now - self._since
        return (rows - self._rows) / elapsed if elapsed > 0 else None


# A non-terminal's plain lines: one at most this often while only the counts
# change (a state or phase change prints at once), so logs stay short.
PLAIN_EVERY_SECONDS = 10.0
# Clear from the cursor to the end of the line (a terminal's EL).
CLEAR_TO_EOL = "\x1b[K"


def terminal_width(out: TextIO) -> int:
    """The terminal's width (the pty's size), else COLUMNS or 80."""
    try:
        return os.get_terminal_size(out.fileno()).columns or 80
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return shutil.get_terminal_size().columns


@dataclass
class ProgressDisplay:
    """On a terminal one line redrawn in place (`\\r`, clear to the end of
    the line), as wide as the terminal is at each draw, the job's last line
    left standing; elsewhere plain lines: a state or phase change at once,
    counts at most every PLAIN_EVERY_SECONDS, and the last snapshot."""

    out: TextIO
    tty: bool
    clock: Callable[[], float] = time.monotonic  # rate, elapsed, cadence: UI, not logic
    width: Callable[[], int] | None = None
    _meter: RateMeter = field(default_factory=RateMeter)
    _drawn: bool = False
    _last: str = ""
    _last_key: tuple[Any, ...] = ()
    _printed_at: float | None = None
    _pending: str = ""
    _started: float | None = None

    def show(self, job: Job) -> None:
        now = self.clock()
        rate = self._meter.rate(job, now)
        if self._started is None:
            self._started = now
        elapsed = _elapsed(job, now - self._started)
        if self.tty:
            width = self.width() if self.width is not None else terminal_width(self.out)
            line = progress_line(job, rate, width=width, elapsed=elapsed)
            self.out.write("\r" + line + CLEAR_TO_EOL)
            # The last snapshot's line stays, above the summary.
            self._drawn = not job.terminal
            if job.terminal:
                self.out.write("\n")
            self.out.flush()
            return
        line = progress_line(job, rate, width=10**6, elapsed=elapsed)
        visible = progress_line(job)  # what changed, rate and time aside
        key = (job.state, job.phase)
        if visible == self._last:
            return
        due = self._printed_at is None or now - self._printed_at >= PLAIN_EVERY_SECONDS
        if key != self._last_key or due or job.terminal:
            self.out.write(line + "\n")
            self.out.flush()
            self._printed_at, self._last_key, self._last, self._pending = now, key, visible, ""
        else:
            self._pending = line  # printed at close if nothing comes after it

    def close(self) -> None:
        if self.tty and self._drawn:
            self.out.write("\r" + CLEAR_TO_EOL)
            self.out.flush()
        elif self._pending:
            self.out.write(self._pending + "\n")
            self.out.flush()
            self._pending = ""


def _elapsed(job: Job, watched: float) -> float:
    """How long the job has run: from its start to its end (or its latest
    change) as the server stamped them, or what this display watched of it
    if that is longer (both clocks are the server's or this one's, never mixed)."""
    if job.started_at is None:
        return watched
    if job.finished_at is not None:
        return (job.finished_at - job.started_at).total_seconds()
    stamped = (job.updated_at - job.started_at).total_seconds() if job.updated_at else 0.0
    return max(stamped, watched)


# ---------------------------------------------------------------- blocks


def _json(values: Any) -> str:
    return json.dumps(values, sort_keys=True)


def connection_block(c: Connection) -> str:
    return block(
        [
            ("id", c.id),
            ("name", c.name),
            ("provider", c.provider),
            ("placement", enum_name(sdk.Placement(c.placement))),
            ("agent_id", c.agent_id or "-"),
            ("config", _json(sdk.struct_to_dict(c.config))),
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
            ("write_mode", enum_name(sdk.WriteMode(p.write_mode))),
            ("schedule", p.schedule or "-"),
            ("paused", str(p.paused).lower()),
            ("spec", _json(sdk.struct_to_dict(p.spec))),
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
            ", ".join(
                [f"extracted {p.rows_extracted:,}", *loaded_said(p), f"total {p.rows_total:,}"]
            ),
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
