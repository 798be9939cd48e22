"""A dry run's sample (setu_engine/movement/dry_run.py `sample`): bounded in
rows, bytes and time, read through the chain the run compiles, and carried
to the server with its fault intact and a runtime's secrets redacted. The
source is one written for the test (the Connector seam the sample reads
through; no database), under looptime where the time bound is."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from setu_engine.kinds import WriteMode
from setu_engine.movement import dry_run
from setu_engine.operators.chain import parse_spec
from setu_engine.planning.plans import PlannedStream, SampleCheck, SampleFault
from setu_engine.values.types import Batch, Column, Stream
from setu_tasks.codec.agents import completion, task_result
from setu_tasks.results import DiscoverResult, redacted
from setu_tasks.specs import LeasedTask

ORDERS = Stream("orders", (Column("id", "bigint"), Column("status", "text")), primary_key=("id",))
DECLARED = parse_spec({"columns": {"orders": {"status": "integer"}}})


class Rows:
    """A source that reads `batches`, then (when `stall`) waits for ever."""

    def __init__(self, *batches: Batch, stall: bool = False) -> None:
        self.batches = batches
        self.stall = stall
        self.closed = False

    async def read(self, stream: Stream, batch_rows: int) -> AsyncIterator[Batch]:
        try:
            for batch in self.batches:
                yield batch
            if self.stall:
                await asyncio.Event().wait()
        finally:
            self.closed = True


async def sampled(source: Rows, limits: dry_run.SampleLimits, spec: Any = DECLARED) -> SampleCheck:
    checks = await dry_run.sample(source, spec, [ORDERS], WriteMode.APPEND, limits)  # type: ignore[arg-type]
    return checks["orders"]


async def test_it_reads_at_most_the_rows_its_limit_allows_and_closes_the_read() -> None:
    source = Rows(*([(i, str(i))] * 1 for i in range(1, 4)), [(i, "7") for i in range(4, 9)])

    check = await sampled(source, dry_run.SampleLimits(rows=5))

    assert check == SampleCheck(rows=5, limit=5, cut="", fault=None)
    assert source.closed


async def test_a_stream_shorter_than_the_limit_is_read_whole() -> None:
    check = await sampled(Rows([(1, "7"), (2, "8")]), dry_run.SampleLimits(rows=1000))

    assert (check.rows, check.cut) == (2, "")
    assert check.said("orders") == (
        "checked the first 2 rows of orders (the stream had no more): every value fits"
    )


async def test_the_byte_bound_stops_the_sample_and_says_so() -> None:
    wide = [(i, "9" * 1024) for i in range(1, 101)]

    check = await sampled(Rows(wide), dry_run.SampleLimits(rows=1000, bytes=10 * 1024))

    assert check.cut == "bytes" and 9 <= check.rows <= 11, check
    assert "(the sample's bytes bound stopped it)" in check.said("orders")


@pytest.mark.looptime
async def test_the_time_bound_stops_a_read_that_stalls_and_keeps_what_it_read() -> None:
    source = Rows([(1, "7"), (2, "8")], stall=True)

    check = await sampled(source, dry_run.SampleLimits(rows=1000, seconds=10))

    assert (check.rows, check.cut, check.fault) == (2, "time", None)
    assert source.closed


async def test_the_first_value_that_would_not_fit_is_reported_as_the_run_fails() -> None:
    check = await sampled(
        Rows([(1, "7"), (2, "shipped"), (3, "boxed")]), dry_run.SampleLimits(rows=1000)
    )

    fault = check.fault
    assert fault is not None
    assert (fault.column, fault.row, fault.value, fault.declared_type) == (
        "status",
        2,
        "'shipped'",
        "integer",
    )
    assert fault.error.startswith("stream 'orders', column 'status', row 2: "), fault.error
    assert check.said("orders").endswith("row 2 would fail the run")


async def test_a_row_the_filter_drops_is_never_converted() -> None:
    spec = parse_spec(
        {
            "columns": {"orders": {"status": "integer"}},
            "operators": [{"op": "filter", "where": "id != 2"}],
        }
    )

    check = await sampled(Rows([(1, "7"), (2, "shipped"), (3, "9")]), dry_run.SampleLimits(), spec)

    assert (check.rows, check.fault) == (3, None)


async def test_a_long_value_is_quoted_short() -> None:
    check = await sampled(Rows([(1, "x" * 5000)]), dry_run.SampleLimits())

    assert check.fault is not None
    assert len(check.fault.value) <= 60 and check.fault.value.endswith("…")
    assert len(check.fault.error) <= dry_run.ERROR_CHARS


def test_a_fault_joins_the_plan_s_reasons_and_the_plan_keeps_its_parts() -> None:
    planned = PlannedStream("orders", "orders", 3, (), ("id",), actions=("create table",))
    fault = SampleFault("status", 2, "'shipped'", "integer", "stream 'orders', …")

    (clean,) = dry_run.with_samples([planned], {"orders": SampleCheck(3, 1000)})
    (failed,) = dry_run.with_samples([planned], {"orders": SampleCheck(3, 1000, "", fault)})

    assert clean.incompatibilities == () and clean.actions == ("create table",)
    assert failed.incompatibilities == (
        "stream 'orders', …; met in a sample of the stream's first 3 rows",
    )
    assert PlannedStream.from_json(failed.to_json()) == failed


def test_an_agent_s_sample_reaches_the_server_whole_and_without_its_secrets() -> None:
    fault = SampleFault("status", 2, "'hunter2-x'", "integer", "row 2: bad (value 'hunter2-x')")
    found = DiscoverResult((ORDERS,), {"orders": SampleCheck(2, 1000, "", fault)})
    ids = [str(uuid.uuid4()) for _ in range(3)]
    task = LeasedTask(ids[0], ids[1], "discover", 1, 3, ids[2])

    sent = redacted(found, lambda text: text.replace("hunter2", "***"))
    read = task_result(completion(task, sent))

    assert isinstance(read, DiscoverResult)
    check = read.samples["orders"]
    assert check.fault is not None
    assert (check.rows, check.fault.row, check.fault.declared_type) == (2, 2, "integer")
    assert "hunter2" not in check.fault.value + check.fault.error
    assert DiscoverResult.from_json(read.to_json()) == read
