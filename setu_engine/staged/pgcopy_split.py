"""One PostgreSQL binary COPY stream cut into batches as it arrives.

An incremental read is a single `COPY (SELECT … ORDER BY cursor) TO STDOUT
(FORMAT binary)`: PostgreSQL encodes the rows, and this cuts the stream at
tuple boundaries into complete COPY streams of `batch_rows` rows each (the
grain of progress, cancellation and staged parts), without decoding a value.
"""

from __future__ import annotations

import struct

from setu_engine.kinds import CopyBatch
from setu_engine.staged.pgcopy import HEADER, SIGNATURE, TRAILER

_I2 = struct.Struct("!h")
_I4 = struct.Struct("!i")
# Signature, flags (int32), header extension length (int32).
_HEADER_FIXED = len(SIGNATURE) + 8
_END = -1


class CopySplitter:
    """Fed the chunks of one binary COPY stream; returns whole batches."""

    def __init__(self, batch_rows: int) -> None:
        self._batch_rows = max(1, batch_rows)
        self._buf = bytearray()
        self._pos = 0  # the end of the last whole tuple in _buf
        self._rows = 0  # whole tuples in _buf[:_pos]
        self._header = False
        self._ended = False

    def feed(self, chunk: bytes | memoryview) -> list[CopyBatch]:
        if self._ended:
            raise ValueError("binary COPY: data after the trailer")
        self._buf += chunk
        if not self._header and not self._skip_header():
            return []
        out: list[CopyBatch] = []
        while (end := self._tuple_end(self._pos)) is not None:
            if end == _END:
                self._ended = True
                break
            self._pos, self._rows = end, self._rows + 1
            if self._rows == self._batch_rows:
                out.append(self._cut())
        return out

    def finish(self) -> CopyBatch | None:
        """The last, partial batch (None when empty), once the stream ended."""
        if not self._ended:
            raise ValueError("binary COPY: the stream ended without its trailer")
        return self._cut() if self._rows else None

    def _skip_header(self) -> bool:
        if len(self._buf) < _HEADER_FIXED:
            return False
        if bytes(self._buf[: len(SIGNATURE)]) != SIGNATURE:
            raise ValueError("binary COPY: not a binary COPY stream")
        (extension,) = _I4.unpack_from(self._buf, len(SIGNATURE) + 4)
        if len(self._buf) < _HEADER_FIXED + extension:
            return False
        del self._buf[: _HEADER_FIXED + extension]
        self._header = True
        return True

    def _tuple_end(self, pos: int) -> int | None:
        """Where the tuple at `pos` ends; None: not all here yet; _END: the
        trailer."""
        buf, size = self._buf, len(self._buf)
        if pos + 2 > size:
            return None
        (fields,) = _I2.unpack_from(buf, pos)
        if fields == -1:
            return _END
        pos += 2
        for _ in range(fields):
            if pos + 4 > size:
                return None
            (length,) = _I4.unpack_from(buf, pos)
            pos += 4 + max(length, 0)
        return pos if pos <= size else None

    def _cut(self) -> CopyBatch:
        batch = CopyBatch(HEADER + bytes(self._buf[: self._pos]) + TRAILER, self._rows)
        del self._buf[: self._pos]
        self._pos = self._rows = 0
        return batch
