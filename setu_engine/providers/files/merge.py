"""Upsert and merge into a file: a hash join of the written rows with the
file's old rows, by key.

The written rows are the build side: each written row's value (its line
already encoded by the file's encoder for a text format, `Lines`; the row
pickled for Parquet) is appended to a temporary file, and only its key
stays in memory, in a dict from the key's bytes to the place of the key's
last written value. The old rows are the probe side, a batch at a time:
each old row's key is looked up there, and the output is the old rows in
place, each replaced by the written value of its key; then the written
keys no old row took, in the order they first came.

- Only the old rows' keys are decoded for the join (`Old`): an old row
  that is replaced is never decoded whole, nor re-encoded; one that is
  kept is decoded as a read would and encoded again (an old row the file
  held reads back and encodes alike).
- A written value is encoded once and written out as its bytes, never
  decoded (a text format), or unpickled once (Parquet).
- Several written rows of one key: the last wins, in its first row's
  place. A key the old file holds twice: its first row is replaced, later
  ones dropped.

Memory: the written keys (a dict entry and the key's bytes: about 150
bytes a row for an integer or short text key, so some 150 MiB per million
written rows) and an 8-byte offset a row; the values stay on disk (read
back through the OS's file cache), and the old file streams a batch at a
time. scripts/bench_copy.py prints peak RSS at two sizes.
"""

from __future__ import annotations

import asyncio
import mmap
import pickle
import tempfile
from array import array
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Sequence,
)
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol, TypeVar

from setu_engine.errors import PermanentError, ValueFault
from setu_engine.kinds import CopyBatch
from setu_engine.values.types import Batch, Row

T = TypeVar("T")


@dataclass(frozen=True)
class Lines:
    """A text format's line encoder and line writer: the spill holds each
    written row as its encoded line (with its terminator)."""

    encode: Callable[[Sequence[Row]], list[bytes]]
    write: Callable[[CopyBatch], Awaitable[None]]


class Columnar(Protocol):
    """A columnar format's store of the written rows (Parquet: Arrow record
    batches in a temporary file), which builds the output batches itself."""

    def put(self, rows: Sequence[Row], start: int) -> None:
        """Appends rows, the first of them written value `start`."""

    def seal(self) -> None:
        """Every row put: open them for reading."""

    def joined(self, plan: list[int], kept: list[Row]) -> Any:
        """An output batch: per plan item, written value seq, or (-1) the
        next of the kept old rows."""

    async def write(self, batch: Any) -> None:
        """Writes an output batch to the file being built."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class Old:
    """A batch of the old file's rows as the join needs them: each row's
    key (key_bytes), and the whole rows of some of them, decoded (and
    checked) as a read decodes them, asked for only for the rows kept."""

    keys: list[bytes]
    rows: Callable[[list[int]], list[Row]]

    @classmethod
    def of(cls, rows: Sequence[Row], positions: list[int]) -> Old:
        """Rows decoded already (CSV; a test's rows)."""
        keys = [key_bytes(row, positions) for row in rows]
        return cls(keys, lambda kept: [rows[i] for i in kept])


# Rows encoded and appended per call (a batch's lines are never all held at once).
PUT_ROWS = 10_000
# Written values per batch when writing the new keys out.
REST_ROWS = 10_000
# A written key an old row has taken already.
_TAKEN = -1


def _normal(value: Any) -> Any:
    if isinstance(value, Decimal) and value.is_finite():
        return value.normalize()
    if isinstance(value, float) and value == 0.0:
        return 0.0  # -0.0 == 0.0
    return value


_BIAS = 1 << 63


def key_bytes(row: Row, positions: list[int]) -> bytes:
    """The key's bytes: equal for values that compare equal (Decimal('1.0')
    and Decimal('1.00'), -0.0 and 0.0). A single integer or text key (the
    usual kind) is written in a few bytes, without pickling."""
    if len(positions) == 1:
        value = row[positions[0]]
        if type(value) is int and -_BIAS <= value < _BIAS:
            return b"i" + (value + _BIAS).to_bytes(8, "big")
        if type(value) is str:
            return b"s" + value.encode("utf-8", "surrogatepass")
    values = tuple(_normal(row[i]) for i in positions)
    try:
        hash(values)
    except TypeError as exc:
        raise PermanentError(
            f"key value {values!r:.100} cannot be compared (a JSON value?): key on other columns"
        ) from exc
    return pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)


class Spill:
    """The written rows of one upsert or merge: keys in memory, values on disk."""

    def __init__(
        self,
        folder: Path | None = None,
        lines: Lines | None = None,
        columnar: Callable[[Path], Columnar] | None = None,
    ) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="setu-merge-", dir=folder)
        self._file = (Path(self._dir.name) / "written.bin").open("w+b")
        self._view: mmap.mmap | bytes | None = None
        # key -> the seq of its last written value (_TAKEN once an old row
        # took it); a dict keeps each key where it first came.
        self._index: dict[bytes, int] = {}
        # Where value seq ends in the file (it starts where seq - 1 ends).
        self._ends = array("q")
        self._size = 0
        self.count = 0
        self.thread: _OneThread | None = None
        self.lines = lines
        self.columnar = columnar(Path(self._dir.name)) if columnar is not None else None

    def close(self) -> None:
        if self.columnar is not None:
            self.columnar.close()
        if isinstance(self._view, mmap.mmap):
            self._view.close()
        self._file.close()
        self._dir.cleanup()
        if self.thread is not None:
            self.thread.shutdown()

    def put(self, rows: Batch, positions: list[int]) -> None:
        for at in range(0, len(rows), PUT_ROWS):
            self._put(rows[at : at + PUT_ROWS], positions)

    def _put(self, rows: Batch, positions: list[int]) -> None:
        start = self.count
        values: list[bytes]
        if self.columnar is not None:
            self.columnar.put(rows, start)
            index = self._index
            for seq, row in enumerate(rows, start):
                index[key_bytes(row, positions)] = seq
            self.count += len(rows)
            return
        if self.lines is None:
            values = [pickle.dumps(row, protocol=5) for row in rows]
        else:
            try:
                values = self.lines.encode(rows)
            except ValueFault as fault:
                raise fault.located(None, start) from fault
        self.put_values([key_bytes(row, positions) for row in rows], values)

    def put_values(self, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        """Values encoded already (lines, with their terminators), by key."""
        start = self.count
        index = self._index
        ends = self._ends
        size = self._size
        for seq, (key, value) in enumerate(zip(keys, values, strict=True), start):
            index[key] = seq
            size += len(value)
            ends.append(size)
        self._file.write(b"".join(values))
        self._size = size
        self.count += len(values)

    def sealed(self) -> None:
        """Every value written: open them for reading."""
        if self.columnar is not None:
            self.columnar.seal()
        self._file.flush()
        size = self._size
        self._view = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def value(self, seq: int) -> Any:
        """Written value seq: its encoded line, or (Parquet) its row."""
        assert self._view is not None
        start = self._ends[seq - 1] if seq else 0
        raw = self._view[start : self._ends[seq]]
        return raw if self.lines is not None else pickle.loads(raw)

    def take(self, keys: list[bytes]) -> list[int | None]:
        """For each old key: the seq of its written value, now taken; None
        when none was written (keep the old row); _TAKEN when an earlier
        old row took it (drop this one)."""
        index = self._index
        out: list[int | None] = []
        for key in keys:
            seq = index.get(key)
            if seq is not None and seq != _TAKEN:
                index[key] = _TAKEN
            out.append(seq)
        return out

    def rest(self) -> Iterator[Any]:
        """The written values no old row took, in the order their keys came
        (batches of rows; with lines, of their lines; columnar: its batches)."""
        chunk: list[Any] = []
        for seq in self._index.values():
            if seq == _TAKEN:
                continue
            chunk.append(seq if self.columnar is not None else self.value(seq))
            if len(chunk) >= REST_ROWS:
                yield self._batch(chunk)
                chunk = []
        if chunk:
            yield self._batch(chunk)

    def _batch(self, values: list[Any]) -> Any:
        if self.columnar is not None:
            return self.columnar.joined(values, [])
        return values if self.lines is None else CopyBatch(b"".join(values), len(values))


class _OneThread:
    """Runs a spill's work on one thread of its own, one call at a time."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="setu-spill")

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False)


async def spill(
    batches: AsyncIterator[Batch],
    positions: list[int],
    lines: Lines | None = None,
    columnar: Callable[[Path], Columnar] | None = None,
) -> Spill:
    """Every written batch, spilled by key (as encoded lines, given
    `lines`; into the columnar store that `columnar` makes in the spill's
    folder, given that); the caller closes the Spill."""
    thread = _OneThread()
    spilled = await thread.run(Spill, None, lines, columnar)
    spilled.thread = thread
    try:
        async for batch in batches:
            await thread.run(spilled.put, batch, positions)
        await thread.run(spilled.sealed)
    except BaseException:
        await thread.run(spilled.close)
        raise
    return spilled


async def spill_lines(
    parts: AsyncIterator[CopyBatch], keys_of: Callable[[list[bytes]], list[bytes]], lines: Lines
) -> Spill:
    """Written rows that come as lines already (JSON Lines that PostgreSQL
    rendered: one record a line), spilled as they are, keyed by keys_of."""
    thread = _OneThread()
    spilled = await thread.run(Spill, None, lines)
    spilled.thread = thread

    def put(part: CopyBatch) -> None:
        # A JSON line holds no raw newline: each part is whole lines.
        values = [line + b"\n" for line in part.data.split(b"\n")[:-1]]
        spilled.put_values(keys_of(values), values)

    try:
        async for part in parts:
            await thread.run(put, part)
        await thread.run(spilled.sealed)
    except BaseException:
        await thread.run(spilled.close)
        raise
    return spilled


async def merge(
    write: Callable[[Batch], Awaitable[None]],
    old: AsyncGenerator[Old, None] | AsyncGenerator[list[Row], None],
    written: Spill,
    positions: list[int],
    keep_old: bool,
) -> None:
    """Old rows in place, each replaced by the written row of its key (and
    dropped when there is none, unless keep_old); then the new keys. The
    old rows come as Old batches, or decoded rows."""
    run = written.thread.run if written.thread is not None else asyncio.to_thread
    lines = written.lines
    columnar = written.columnar
    async with aclosing(old):
        async for batch in old:
            rows = batch if isinstance(batch, Old) else Old.of(batch, positions)
            if columnar is not None:
                await columnar.write(await run(_replace_columnar, rows, written, keep_old))
            elif lines is None:
                await write(await run(_replace, rows, written, keep_old))
            else:
                await lines.write(await run(_replace_lines, rows, written, keep_old))
    rest = written.rest()
    while (out := await run(next, rest, None)) is not None:
        if columnar is not None:
            await columnar.write(out)
        elif isinstance(out, CopyBatch):
            assert lines is not None
            await lines.write(out)
        else:
            await write(out)


def _joined(old: Old, written: Spill, keep_old: bool) -> tuple[list[int], list[Row]]:
    """Each output item in order: a written value's seq, or -1 for the next
    old row kept; and the old rows kept, decoded."""
    plan: list[int] = []
    kept: list[int] = []
    for at, seq in enumerate(written.take(old.keys)):
        if seq is None:
            if keep_old:
                plan.append(-1)
                kept.append(at)
        elif seq != _TAKEN:
            plan.append(seq)
    return plan, old.rows(kept) if kept else []


def _replace(old: Old, written: Spill, keep_old: bool) -> Batch:
    plan, kept = _joined(old, written, keep_old)
    rows = iter(kept)
    return [next(rows) if seq < 0 else written.value(seq) for seq in plan]


def _replace_columnar(old: Old, written: Spill, keep_old: bool) -> Any:
    assert written.columnar is not None
    plan, kept = _joined(old, written, keep_old)
    return written.columnar.joined(plan, kept)


def _replace_lines(old: Old, written: Spill, keep_old: bool) -> CopyBatch:
    assert written.lines is not None
    plan, kept = _joined(old, written, keep_old)
    encoded = iter(written.lines.encode(kept) if kept else ())
    data = b"".join(next(encoded) if seq < 0 else written.value(seq) for seq in plan)
    return CopyBatch(data, len(plan))
