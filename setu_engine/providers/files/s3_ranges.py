"""An S3 object as a seekable, read-only file, for code that reads files
in a worker thread (pyarrow reading Parquet): each read is a ranged GET run
on the event loop, so a reader that needs the footer and a few row groups
fetches those bytes only, and nothing is downloaded whole.

Every GET names the ETag the object had when it was opened (`IfMatch`): an
object replaced mid-read fails the read instead of mixing two versions.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

# Small reads (a footer, a page header) fetch a block around them.
BLOCK = 1024 * 1024


class S3RangeFile(io.RawIOBase):
    def __init__(
        self,
        client: Any,
        bucket: str,
        key: str,
        size: int,
        etag: str,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__()
        self.client = client
        self.bucket = bucket
        self.key = key
        self.size = size
        self.etag = etag
        self.loop = loop
        self.position = 0
        self.block_start = 0
        self.block = b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._read(self.position, len(view))
        view[: len(data)] = data
        self.position += len(data)
        return len(data)

    def _read(self, start: int, length: int) -> bytes:
        end = min(start + length, self.size)
        cached = b""
        if self.block_start <= start < self.block_start + len(self.block):
            cached = self.block[start - self.block_start : end - self.block_start]
            start += len(cached)  # only what the block lacks is fetched
        if start >= end:
            return cached
        if end - start >= BLOCK:
            return cached + self._fetch(start, end)
        self.block_start, self.block = start, self._fetch(start, min(start + BLOCK, self.size))
        return cached + self.block[: end - start]

    def _fetch(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object: called from a worker thread."""
        future = asyncio.run_coroutine_threadsafe(self._get(start, end), self.loop)
        return future.result()

    async def _get(self, start: int, end: int) -> bytes:
        response = await self.client.get_object(
            Bucket=self.bucket, Key=self.key, Range=f"bytes={start}-{end - 1}", IfMatch=self.etag
        )
        async with response["Body"] as body:
            data: bytes = await body.read()
        return data
