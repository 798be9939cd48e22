"""The staged format: what an extract leaves in blob storage for a load.

    ws/{ws}/pl/{pipeline}/run/{run}/
        manifest.json                          written last: its presence means "complete"
        s000-public.users/part-00000.pgcopy.zst
        s000-public.users/part-00001.pgcopy.zst
        …

A part is one complete PostgreSQL binary COPY stream (pgcopy.py),
compressed with zstd. Why this format:
- Speed. PostgreSQL sources write it and PostgreSQL destinations read it
  in C (COPY … FORMAT binary); the bytes cross the engine untouched, so a
  staged Postgres → Postgres run costs two COPYs and a compression, not a
  decode and an encode of every row in Python. zstd at level 1 compresses
  at several hundred MB/s and releases the GIL, so it overlaps with COPY.
- Type fidelity. Binary COPY carries numeric digits, timestamps to the
  microsecond, jsonb and bytea exactly; no text round trip, no float
  formatting, no timezone guessing. Other providers encode to it through
  the neutral types (values/types.py) and decode from it the same way.
- Self-contained parts. Each part holds whole rows with a header and
  trailer, so its row count is exact and a load streams part by part.

The manifest names every stream's schema and key, and every part's row
count, compressed size and SHA-256; a load verifies each part against it
before a byte reaches the destination.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import zstandard

from setu_engine.errors import BlobNotFound, StagingError
from setu_engine.kinds import CopyBatch
from setu_engine.staged.blob import BlobStore
from setu_engine.support import testpoints
from setu_engine.support.closing import closing
from setu_engine.values.types import Stream, qualified
from setu_engine.values.window import CursorMark

FORMAT = "setu-staged/1"
PART_FORMAT = "pgcopy-binary+zstd"
MANIFEST = "manifest.json"
ZSTD_LEVEL = 1


def run_prefix(workspace_id: object, pipeline_id: object, job_id: object) -> str:
    """Where one run stages: the only place the layout is spelled."""
    return f"ws/{workspace_id}/pl/{pipeline_id}/run/{job_id}/"


def is_run_prefix(prefix: str, workspace_id: object, job_id: object) -> bool:
    """True when `prefix` is this run's own, under whichever pipeline (a run
    outlives a deleted pipeline, and its staged data still has to go)."""
    marker = "\0"
    head, tail = run_prefix(workspace_id, marker, job_id).split(marker)
    if not (prefix.startswith(head) and prefix.endswith(tail)):
        return False
    pipeline = prefix[len(head) : len(prefix) - len(tail)]
    return bool(pipeline) and "/" not in pipeline and ".." not in pipeline


@dataclass(frozen=True)
class Part:
    path: str
    rows: int
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "rows": self.rows, "bytes": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class StoredPart:
    """A part as the run's books record it once it is stored whole: which
    stream (its place in the run and its name), its number there, the part,
    and where the source's read stood after it (`position`, the provider's
    own spelling; "" when the read cannot resume after it)."""

    stream_index: int
    stream: str
    number: int
    part: Part
    position: str = ""


@dataclass
class StagedStream:
    stream: Stream
    parts: list[Part] = field(default_factory=list)
    # An incremental stream's highest cursor value extracted (text); what
    # its state advances to once the load commits, wherever that runs.
    cursor: CursorMark | None = None

    @property
    def name(self) -> str:
        return qualified(self.stream)

    @property
    def rows(self) -> int:
        return sum(part.rows for part in self.parts)

    @property
    def checksum(self) -> str:
        """SHA-256 over the parts' digests, in order: one value per stream to
        reconcile extract and load."""
        digest = hashlib.sha256()
        for part in self.parts:
            digest.update(bytes.fromhex(part.sha256))
        return digest.hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.stream.to_dict(),
            "stream": self.name,
            "rows": self.rows,
            "checksum": self.checksum,
            "parts": [part.to_dict() for part in self.parts],
            **({"cursor": self.cursor.to_dict()} if self.cursor is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StagedStream:
        parts = [
            Part(str(p["path"]), int(p["rows"]), int(p["bytes"]), str(p["sha256"]))
            for p in data["parts"]
        ]
        staged = cls(Stream.from_dict(data), parts, CursorMark.from_dict(data.get("cursor")))
        if staged.rows != int(data["rows"]) or staged.checksum != data["checksum"]:
            raise StagingError(f"manifest entry for {staged.name} contradicts its parts")
        return staged


@dataclass
class Manifest:
    streams: list[StagedStream]

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.streams)

    def to_bytes(self) -> bytes:
        body = {
            "format": FORMAT,
            "part_format": PART_FORMAT,
            "streams": [s.to_dict() for s in self.streams],
        }
        return json.dumps(body, indent=1).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT or body.get("part_format") != PART_FORMAT:
                raise StagingError(
                    f"staged data is {body.get('format')!r}/{body.get('part_format')!r}; "
                    f"this runtime reads {FORMAT}/{PART_FORMAT}"
                )
            return cls([StagedStream.from_dict(s) for s in body["streams"]])
        except (ValueError, KeyError, TypeError) as exc:
            raise StagingError(f"unreadable manifest: {exc}") from exc


def _slug(index: int, stream: Stream) -> str:
    return f"s{index:03d}-" + re.sub(r"[^A-Za-z0-9_.-]", "_", qualified(stream))[:80]


def _pack(data: bytes) -> tuple[bytes, str]:
    packed = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    return packed, hashlib.sha256(packed).hexdigest()


def _unpack(packed: bytes, part: Part) -> bytes:
    if hashlib.sha256(packed).hexdigest() != part.sha256:
        raise StagingError(f"staged part {part.path} does not match its manifest checksum")
    return zstandard.ZstdDecompressor().decompress(packed)


async def write_stream(
    blob: BlobStore,
    prefix: str,
    index: int,
    stream: Stream,
    batches: AsyncIterator[CopyBatch],
    on_batch: Callable[[int], Awaitable[None]],
    on_part: Callable[[Part, CopyBatch], None] | None = None,
    resumed: Sequence[Part] = (),
) -> StagedStream:
    """Stages every batch as one part. The next batch is read while the last
    one is compressed and uploaded (one in flight), so the source never
    waits on the blob store and memory holds at most two batches.

    `on_part` hears of each part once it is stored whole (the put returned),
    in order, with the batch it holds: a load beside the extract
    (setu_engine/movement/transfer.py) reads only complete parts. `resumed`: the parts
    an earlier attempt stored (verified), which the stream starts with;
    `batches` then holds only the rows after them."""
    staged = StagedStream(stream, list(resumed))
    folder = _slug(index, stream)
    pending: asyncio.Task[Part] | None = None

    async def upload(number: int, batch: CopyBatch) -> Part:
        packed, digest = await asyncio.to_thread(_pack, batch.data)
        path = f"{folder}/part-{number:05d}.pgcopy.zst"
        await blob.put(prefix + path, packed)
        part = Part(path, batch.rows, len(packed), digest)
        # Uploads run one at a time, in order: so do these.
        if on_part is not None:
            on_part(part, batch)
        return part

    try:
        number = len(resumed)
        # Closed here however the loop ends (a cancel raised by on_batch):
        # the source's read is not left open (setu_engine/support/closing.py).
        async with closing(batches):
            async for batch in batches:
                if batch.rows == 0 and (number > 0 or resumed):
                    continue
                if pending is not None:
                    staged.parts.append(await pending)
                pending = asyncio.create_task(upload(number, batch))
                number += 1
                await on_batch(batch.rows)
                await testpoints.reached(testpoints.EXTRACTED_PART.format(index=number - 1))
                read = number - len(resumed)
                await testpoints.reached(testpoints.READ_PART.format(count=read))
        if pending is not None:
            staged.parts.append(await pending)
            pending = None
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
    return staged


async def verify_part(blob: BlobStore, prefix: str, part: Part) -> str | None:
    """None when `part` is in blob with its recorded size and SHA-256; else
    what is wrong with it, for the timeline."""
    try:
        packed = await blob.get(prefix + part.path)
    except BlobNotFound:
        return "not found"
    if len(packed) != part.size:
        return f"{len(packed)} bytes, recorded {part.size}"
    digest = await asyncio.to_thread(lambda: hashlib.sha256(packed).hexdigest())
    if digest != part.sha256:
        return "its SHA-256 differs from the recorded one"
    return None


async def write_manifest(blob: BlobStore, prefix: str, manifest: Manifest) -> None:
    await blob.put(prefix + MANIFEST, manifest.to_bytes())


async def read_manifest(blob: BlobStore, prefix: str) -> Manifest:
    return Manifest.from_bytes(await blob.get(prefix + MANIFEST))


async def read_part(blob: BlobStore, prefix: str, part: Part) -> CopyBatch:
    """One part, verified against its checksum and decompressed."""
    data = await asyncio.to_thread(_unpack, await blob.get(prefix + part.path), part)
    return CopyBatch(data, part.rows)


async def read_parts(
    blob: BlobStore, prefix: str, staged: StagedStream
) -> AsyncIterator[CopyBatch]:
    """The stream's parts, verified and decompressed, the next one fetched
    while the caller loads the current one."""

    def fetch(part: Part) -> asyncio.Task[CopyBatch]:
        return asyncio.create_task(read_part(blob, prefix, part))

    parts = list(staged.parts)
    pending = fetch(parts[0]) if parts else None
    try:
        for position in range(len(parts)):
            assert pending is not None
            current = await pending
            following = position + 1
            pending = fetch(parts[following]) if following < len(parts) else None
            yield current
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
