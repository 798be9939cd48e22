"""How setu's client commands show things: aligned tables, key: value
blocks for a connection, pipeline or job, enum and timestamp formatting, and
the live progress line of a followed job.

Separate from cli_client.py, which parses arguments and calls the server:
this module only turns messages into text, so the output format can be read
and changed in one place.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, TextIO

from google.protobuf import timestamp_pb2
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from setu_client._proto.setu.v1 import common_pb2, connections_pb2, jobs_pb2, pipelines_pb2

# ---------------------------------------------------------------- rendering


def enum_name(prefix: str, value: str) -> str:
    """JOB_STATE_SUCCEEDED → succeeded."""
    return value.removeprefix(prefix).lower() if not value.endswith("UNSPECIFIED") else "-"


def _state(job: common_pb2.Job) -> str:
    return enum_name("JOB_STATE_", common_pb2.JobState.Name(job.state))


def _phase(job: common_pb2.Job) -> str:
    return enum_name("PHASE_", common_pb2.Phase.Name(job.phase))


def when(ts: timestamp_pb2.Timestamp) -> str:
    if not ts.seconds and not ts.nanos:
        return "-"
    return ts.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def as_dict(message: Message) -> dict[str, Any]:
    return MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def _emit(args: argparse.Namespace, document: Any, human: str) -> None:
    print(json.dumps(document, indent=2) if args.json else human)


def _phase_rows(job: common_pb2.Job) -> int:
    loading = job.phase in (common_pb2.PHASE_LOAD, common_pb2.PHASE_DIRECT)
    return job.progress.rows_loaded if loading else job.progress.rows_extracted


def progress_line(job: common_pb2.Job, rate: float | None, bar_width: int = 20) -> str:
    """One line of the live display: state, phase, rows, a bar once the total
    is known (for the current phase's counter), and the rate if measured."""
    p = job.progress
    total = f"/{p.rows_total:,}" if p.rows_total else ""
    loading = job.phase in (common_pb2.PHASE_LOAD, common_pb2.PHASE_DIRECT)
    parts = [
        f"{_state(job):<9}",
        f"{_phase(job):<7}",
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

    _phase: int = -1
    _rows: int = 0
    _since: float = 0.0

    def rate(self, job: common_pb2.Job, now: float) -> float | None:
        rows = _phase_rows(job)
        if job.phase == common_pb2.PHASE_UNSPECIFIED:
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

    def show(self, job: common_pb2.Job) -> None:
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


def _connection_pairs(c: connections_pb2.Connection) -> list[tuple[str, str]]:
    return [
        ("id", c.id),
        ("name", c.name),
        ("provider", c.provider),
        ("placement", enum_name("PLACEMENT_", common_pb2.Placement.Name(c.placement))),
        ("agent_id", c.agent_id or "-"),
        ("config", json.dumps(as_dict(c.config), sort_keys=True)),
        ("created_at", when(c.created_at)),
        ("updated_at", when(c.updated_at)),
    ]


def _pipeline_pairs(p: pipelines_pb2.Pipeline, names: dict[str, str]) -> list[tuple[str, str]]:
    return [
        ("id", p.id),
        ("name", p.name),
        ("source", names.get(p.source_connection_id, p.source_connection_id)),
        ("destination", names.get(p.destination_connection_id, p.destination_connection_id)),
        ("streams", ", ".join(p.streams) or "(all)"),
        ("write_mode", enum_name("WRITE_MODE_", common_pb2.WriteMode.Name(p.write_mode))),
        ("schedule", p.schedule or "-"),
        ("paused", str(p.paused).lower()),
        ("spec", json.dumps(as_dict(p.spec), sort_keys=True)),
        ("next_run_at", when(p.next_run_at)),
        ("created_at", when(p.created_at)),
    ]


def _job_pairs(j: common_pb2.Job) -> list[tuple[str, str]]:
    p = j.progress
    pairs = [
        ("id", j.id),
        ("state", _state(j) + (" (cancel requested)" if j.cancel_requested else "")),
        ("kind", enum_name("JOB_KIND_", common_pb2.JobKind.Name(j.kind))),
        ("pipeline_id", j.pipeline_id or "-"),
        ("phase", _phase(j)),
        ("dry_run", str(j.dry_run).lower()),
        (
            "rows",
            f"extracted {p.rows_extracted:,}, loaded {p.rows_loaded:,}, total {p.rows_total:,}",
        ),
        ("runtimes", f"extract {j.extract_runtime or '-'}, load {j.load_runtime or '-'}"),
        ("created_at", when(j.created_at)),
        ("started_at", when(j.started_at)),
        ("finished_at", when(j.finished_at)),
    ]
    if j.started_at.seconds and j.finished_at.seconds:
        took = j.finished_at.ToDatetime() - j.started_at.ToDatetime()
        pairs.append(("duration", f"{took.total_seconds():.1f}s"))
    if j.result.fields:
        pairs.append(("result", json.dumps(as_dict(j.result), sort_keys=True)))
    if j.error_message:
        pairs.append(("error", j.error_message))
    return pairs


def _outputs_table(outputs: jobs_pb2.GetJobOutputsResponse) -> str:
    rows = [
        (s.stream, f"{s.rows_extracted:,}", f"{s.rows_loaded:,}", s.checksum or "-")
        for s in outputs.streams
    ]
    return table(("STREAM", "EXTRACTED", "LOADED", "CHECKSUM"), rows) if rows else "no outputs"
