"""Where staged data lives between extract and load: a folder, or an S3 bucket.

Keys are '/'-separated relative paths, a run's under its prefix
(staging.run_prefix), such as `…/users/part-00000.pgcopy.zst`. Objects are
whole (tens of MiB at most), written atomically: a reader sees all of an
object or none of it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from setu_engine.errors import BlobError, BlobNotFound
from setu_engine.staged.s3 import (
    BotoCoreError,
    ClientError,
    S3Settings,
    error_code,
    error_message,
    is_not_found,
    s3_client,
)

BACKENDS = ("local", "s3")
# Marks a local put in progress; keys may not contain it, so list never
# mistakes a half-written file for an object.
TEMP_MARK = ".setu-tmp-"
DELETE_BATCH = 1000


class BlobStore(Protocol):
    async def put(self, key: str, data: bytes) -> None: ...

    async def get(self, key: str) -> bytes: ...

    async def exists(self, key: str) -> bool: ...

    async def list(self, prefix: str) -> list[str]: ...

    async def delete_prefix(self, prefix: str) -> int: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class BlobSettings:
    backend: str = "local"
    # A folder for "local", a bucket for "s3".
    root: str = ""
    endpoint_url: str = ""
    region: str = ""


def open_blob(settings: BlobSettings, s3: S3Settings | None = None) -> BlobStore:
    """The store the settings name; raises ValueError when they are wrong.
    `s3` carries credentials; the blob settings' endpoint and region win."""
    if settings.backend not in BACKENDS:
        raise ValueError(
            f"unknown blob backend {settings.backend!r}; use one of {', '.join(BACKENDS)}"
        )
    if not settings.root:
        what = "a folder" if settings.backend == "local" else "a bucket"
        raise ValueError(f"the {settings.backend} blob backend needs a root ({what})")
    if settings.backend == "local":
        return LocalBlobStore(Path(settings.root))
    base = s3 or S3Settings()
    merged = replace(
        base,
        endpoint_url=settings.endpoint_url or base.endpoint_url,
        region=settings.region or base.region,
    )
    return S3BlobStore(settings.root, merged)


def check_key(key: str) -> None:
    """Raises BlobError unless key is a relative path that stays under the root."""
    reason = _key_fault(key.split("/")) if key else "it is empty"
    if reason:
        raise BlobError(f"invalid blob key {key!r}: {reason}")


def check_prefix(prefix: str) -> None:
    # A prefix may end with '/' or part of a name; only its folders must be sound.
    folders = prefix.split("/")[:-1]
    reason = _key_fault(folders) if folders else ""
    if reason or "\\" in prefix or TEMP_MARK in prefix:
        raise BlobError(f"invalid blob prefix {prefix!r}: {reason or 'bad character'}")


def _key_fault(segments: list[str]) -> str:
    for segment in segments:
        if segment == "":
            return "empty path segment (leading, doubled or trailing '/')"
        if segment in (".", ".."):
            return f"{segment!r} segments are not allowed"
        if "\\" in segment:
            return "backslashes are not allowed"
        if TEMP_MARK in segment:
            return f"{TEMP_MARK!r} is reserved"
    return ""


class LocalBlobStore(BlobStore):
    """Objects as files under a folder. A put writes a temporary file beside
    the target and renames it into place, which is atomic on one filesystem."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        check_key(key)
        return self.root.joinpath(*key.split("/"))

    async def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            await asyncio.to_thread(_write_atomically, path, data)
        except OSError as exc:
            raise BlobError(f"cannot write blob {key!r} under {self.root}: {exc}") from exc

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise BlobNotFound(f"blob {key!r} not found under {self.root}") from exc
        except OSError as exc:
            raise BlobError(f"cannot read blob {key!r} under {self.root}: {exc}") from exc

    async def exists(self, key: str) -> bool:
        return await asyncio.to_thread(self._path(key).is_file)

    async def list(self, prefix: str) -> list[str]:
        check_prefix(prefix)
        try:
            return await asyncio.to_thread(self._list, prefix)
        except OSError as exc:
            raise BlobError(f"cannot list blobs {prefix!r} under {self.root}: {exc}") from exc

    def _list(self, prefix: str) -> builtins.list[str]:
        folder = self.root.joinpath(*prefix.split("/")[:-1])
        keys: builtins.list[str] = []
        for dirpath, _, filenames in os.walk(folder):
            base = Path(dirpath).relative_to(self.root).as_posix()
            for name in filenames:
                key = name if base == "." else f"{base}/{name}"
                if TEMP_MARK not in name and key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    async def delete_prefix(self, prefix: str) -> int:
        keys = await self.list(prefix)
        try:
            await asyncio.to_thread(self._delete, keys)
        except OSError as exc:
            raise BlobError(f"cannot delete blobs {prefix!r} under {self.root}: {exc}") from exc
        return len(keys)

    def _delete(self, keys: builtins.list[str]) -> None:
        folders: set[Path] = set()
        for key in keys:
            path = self.root.joinpath(*key.split("/"))
            path.unlink(missing_ok=True)
            folders.update(p for p in path.parents if p != self.root and self.root in p.parents)
        # Deepest first, so a parent is tried after its children are gone.
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()

    async def close(self) -> None:
        return None


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"{path.name}{TEMP_MARK}{uuid.uuid4().hex}")
    try:
        with temp.open("wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


class S3BlobStore(BlobStore):
    """Objects in one bucket. S3 makes an object visible only once it is
    complete, so a single put_object is already atomic."""

    def __init__(self, bucket: str, settings: S3Settings) -> None:
        self.bucket = bucket
        self.settings = settings
        self._stack = contextlib.AsyncExitStack()
        self._client: Any = None
        self._lock = asyncio.Lock()

    async def _open(self) -> Any:
        async with self._lock:
            if self._client is None:
                self._client = await self._stack.enter_async_context(s3_client(self.settings))
        return self._client

    def _error(self, what: str, exc: Exception) -> BlobError:
        where = f"s3://{self.bucket} at {self.settings.where()}"
        if isinstance(exc, ClientError):
            if is_not_found(exc):
                return BlobNotFound(f"blob {what} not found in {where}")
            if error_code(exc) == "NoSuchBucket":
                return BlobError(f"bucket {self.bucket} does not exist at {self.settings.where()}")
            return BlobError(f"blob {what} in {where} failed: {error_message(exc)}")
        return BlobError(f"blob {what} in {where} failed: {exc}")

    async def put(self, key: str, data: bytes) -> None:
        check_key(key)
        client = await self._open()
        try:
            await client.put_object(Bucket=self.bucket, Key=key, Body=data)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(repr(key), exc) from exc

    async def get(self, key: str) -> bytes:
        check_key(key)
        client = await self._open()
        try:
            response = await client.get_object(Bucket=self.bucket, Key=key)
            async with response["Body"] as body:
                data: bytes = await body.read()
                return data
        except (ClientError, BotoCoreError) as exc:
            raise self._error(repr(key), exc) from exc

    async def exists(self, key: str) -> bool:
        check_key(key)
        client = await self._open()
        try:
            await client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if is_not_found(exc):
                return False
            raise self._error(repr(key), exc) from exc
        except BotoCoreError as exc:
            raise self._error(repr(key), exc) from exc
        return True

    async def list(self, prefix: str) -> list[str]:
        check_prefix(prefix)
        client = await self._open()
        keys: list[str] = []
        try:
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            async for page in pages:
                keys.extend(item["Key"] for item in page.get("Contents", []))
        except (ClientError, BotoCoreError) as exc:
            raise self._error(f"prefix {prefix!r}", exc) from exc
        return sorted(keys)

    async def delete_prefix(self, prefix: str) -> int:
        keys = await self.list(prefix)
        client = await self._open()
        for start in range(0, len(keys), DELETE_BATCH):
            batch = [{"Key": key} for key in keys[start : start + DELETE_BATCH]]
            try:
                answer = await client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
                )
            except (ClientError, BotoCoreError) as exc:
                raise self._error(f"prefix {prefix!r}", exc) from exc
            if errors := answer.get("Errors"):
                first = errors[0]
                raise BlobError(
                    f"cannot delete {len(errors)} blobs under {prefix!r} in s3://{self.bucket}: "
                    f"{first.get('Key')}: {first.get('Code')}: {first.get('Message')}"
                )
        return len(keys)

    async def close(self) -> None:
        async with self._lock:
            self._client = None
            await self._stack.aclose()
