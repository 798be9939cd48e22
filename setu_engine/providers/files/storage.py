"""Where the `file` provider's files are: a local folder or file, or an S3
prefix or key, behind one small protocol (list, read lines, write a temp
file and swap it in).

Separate from connector.py because it is only I/O: it knows nothing of formats,
types or write modes, and the connector sees one interface for both places.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, aclosing
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Protocol

from setu_engine.errors import ConfigError, PermanentError, ProviderError
from setu_engine.providers.files.failures import file_error, s3_error
from setu_engine.staged import s3
from setu_engine.staged.s3 import BotoCoreError, ClientError

READ_HINT = 1024 * 1024

# ---------------------------------------------------------------- storage


class _Storage(Protocol):
    """Where the files are: a local folder or file, or an S3 prefix or key.
    A file is named by a ref: its path, or its key."""

    single: bool

    def target(self, stream: str, ext: str) -> str: ...

    def where(self, ref: str) -> str: ...

    def beside(self, name: str) -> str:
        """The ref of `name` (a relative path) in the folder, or in a single
        file's own folder: where the load markers live."""
        ...

    async def list_files(self, ext: str) -> list[str]: ...

    def chunks(self, ref: str) -> AsyncGenerator[list[bytes], None]: ...

    async def exists(self, ref: str) -> bool: ...

    async def version(self, ref: str) -> tuple[str, str]:
        """(signature, modified as ISO text) of ref: a new signature means
        the object changed (size and mtime locally, ETag on S3)."""
        ...

    async def size(self, ref: str) -> int:
        """ref's size in bytes."""
        ...

    async def temp_file(self, ref: str) -> Path: ...

    async def copy_to(self, ref: str, temp: Path) -> None: ...

    async def commit(self, ref: str, temp: Path) -> None: ...

    async def test(self, ext: str) -> str: ...

    async def close(self) -> None: ...


def _check_stream_name(stream: str) -> None:
    # A stream's name is one file name inside the folder, never a path.
    if not stream or any(c in stream for c in "/\\\x00") or stream in (".", ".."):
        raise ConfigError(
            f"stream name {stream!r} cannot name a file (no path separators, no . or ..); "
            f"name its file in the pipeline's spec.destination"
        )


# Opening a file does not follow a link at its last step: a link swapped in
# after the path was resolved and checked is refused, not followed. (0 where
# the platform has no such flag.)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _open_nofollow(path: Path) -> BinaryIO:
    return os.fdopen(os.open(path, os.O_RDONLY | _NOFOLLOW), "rb")


class _LocalFiles:
    """A local folder or file. With a `root` (the cloud's workspace folder),
    every path is resolved, links followed, and must stay inside it: a link
    in a folder cannot lend another workspace's file, or the server's."""

    def __init__(self, path: Path, single: bool, root: Path | None = None) -> None:
        self.path = path
        self.single = single
        self.root = root

    def _inside(self, ref: str | Path) -> Path:
        """The real path of ref, checked against the root (blocking I/O)."""
        try:
            real = Path(ref).resolve()
        except RuntimeError as exc:  # a loop of links
            raise ProviderError(f"cannot resolve {Path(ref).name}: {exc}") from exc
        if self.root is not None and not real.is_relative_to(self.root):
            # Refused for good (ConfigError): another attempt meets the same link.
            raise ConfigError(
                f"{Path(ref).name} leads outside the workspace folder {self.root}/; "
                f"a cloud connection reads and writes only files inside it"
            )
        return real

    def target(self, stream: str, ext: str) -> str:
        _check_stream_name(stream)
        return str(self.path if self.single else self.path / f"{stream}{ext}")

    def where(self, ref: str) -> str:
        return ref

    def beside(self, name: str) -> str:
        return str((self.path.parent if self.single else self.path) / name)

    async def list_files(self, ext: str) -> list[str]:
        def scan() -> list[str]:
            if self.single:
                found = [self.path] if self.path.is_file() else []
            else:
                found = [p for p in self.path.iterdir() if p.suffix == ext and p.is_file()]
            for path in found:
                self._inside(path)
            return sorted(str(p) for p in found)

        try:
            return await asyncio.to_thread(scan)
        except OSError as exc:
            raise file_error(exc, f"cannot list {self.path}") from exc

    async def chunks(self, ref: str) -> AsyncGenerator[list[bytes], None]:
        try:
            real = await asyncio.to_thread(self._inside, ref)
            source = await asyncio.to_thread(_open_nofollow, real)
        except OSError as exc:
            raise file_error(exc, f"cannot open {ref}") from exc
        try:
            while lines := await asyncio.to_thread(source.readlines, READ_HINT):
                yield lines
        except OSError as exc:
            raise file_error(exc, f"cannot read {ref}") from exc
        finally:
            source.close()

    async def exists(self, ref: str) -> bool:
        return await asyncio.to_thread(lambda: self._inside(ref).is_file())

    async def version(self, ref: str) -> tuple[str, str]:
        try:
            stat = await asyncio.to_thread(lambda: self._inside(ref).stat())
        except OSError as exc:
            raise file_error(exc, f"cannot read {ref}") from exc
        modified = datetime.fromtimestamp(stat.st_mtime, UTC)
        return f"{stat.st_mtime_ns}:{stat.st_size}", modified.isoformat(sep=" ")

    async def size(self, ref: str) -> int:
        try:
            return (await asyncio.to_thread(lambda: self._inside(ref).stat())).st_size
        except OSError as exc:
            raise file_error(exc, f"cannot read {ref}") from exc

    async def temp_file(self, ref: str) -> Path:
        # Beside the target, so the final rename stays on one filesystem.
        path = Path(ref)
        try:
            await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
            path = await asyncio.to_thread(self._inside, path)
        except OSError as exc:
            raise file_error(exc, f"cannot create {path.parent}") from exc
        return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")

    async def copy_to(self, ref: str, temp: Path) -> None:
        def copy() -> None:
            with _open_nofollow(self._inside(ref)) as source, temp.open("wb") as out:
                shutil.copyfileobj(source, out)

        await asyncio.to_thread(copy)

    async def commit(self, ref: str, temp: Path) -> None:
        # Into the resolved path: a link to a file inside the root keeps
        # pointing at the new content.
        await asyncio.to_thread(lambda: os.replace(temp, self._inside(ref)))

    async def test(self, ext: str) -> str:
        def check() -> str:
            kind = "file" if self.single else "folder"
            exists = self.path.is_file() if self.single else self.path.is_dir()
            if not exists:
                raise PermanentError(f"{kind} {self.path} does not exist (check config.url)")
            if not os.access(self.path, os.R_OK | (0 if self.single else os.X_OK)):
                raise PermanentError(
                    f"{kind} {self.path} is not readable (give this runtime access)"
                )
            if self.single:
                return f"file {self.path} ({self.path.stat().st_size} bytes)"
            count = sum(1 for p in self.path.iterdir() if p.suffix == ext and p.is_file())
            return f"{count} {ext[1:]} files in {self.path}"

        return await asyncio.to_thread(check)

    async def close(self) -> None:
        return None


class _S3Files:
    def __init__(self, settings: s3.S3Settings, bucket: str, key: str, single: bool) -> None:
        self.settings = settings
        self.bucket = bucket
        self.single = single
        # A prefix names a folder: s3://b/data and s3://b/data/ both list data/.
        self.key = key if single or not key or key.endswith("/") else key + "/"
        self._stack = AsyncExitStack()
        self._client: Any = None
        self._lock = asyncio.Lock()

    async def _open(self) -> Any:
        async with self._lock:
            if self._client is None:
                client = s3.s3_client(self.settings)
                self._client = await self._stack.enter_async_context(client)
        return self._client

    def target(self, stream: str, ext: str) -> str:
        _check_stream_name(stream)
        return self.key if self.single else f"{self.key}{stream}{ext}"

    def where(self, ref: str) -> str:
        return f"s3://{self.bucket}/{ref}"

    def beside(self, name: str) -> str:
        folder = self.key.rpartition("/")[0] + "/" if self.single else self.key
        return f"{folder.lstrip('/')}{name}"

    def _error(self, ref: str, exc: Exception) -> ProviderError:
        if isinstance(exc, ClientError):
            code = s3.error_code(exc)
            if code == "NoSuchBucket":
                where = self.settings.where()
                return s3_error(exc, f"bucket {self.bucket} does not exist at {where}")
            if s3.is_not_found(exc):
                return s3_error(exc, f"{self.where(ref)} does not exist")
            return s3_error(exc, f"{self.where(ref)}: {s3.error_message(exc)}")
        return s3_error(exc, f"{self.where(ref)} at {self.settings.where()}: {exc}")

    async def list_files(self, ext: str) -> list[str]:
        client = await self._open()
        keys: list[str] = []
        try:
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.key, Delimiter="/"
            )
            async for page in pages:
                keys.extend(item["Key"] for item in page.get("Contents", []))
        except (ClientError, BotoCoreError) as exc:
            raise self._error(self.key, exc) from exc
        if self.single:
            return [key for key in keys if key == self.key]
        return sorted(key for key in keys if PurePosixPath(key).suffix == ext)

    async def chunks(self, ref: str) -> AsyncGenerator[list[bytes], None]:
        client = await self._open()
        try:
            async with aclosing(s3.iter_lines(client, self.bucket, ref)) as lines:
                async for chunk in lines:
                    yield chunk
        except (ClientError, BotoCoreError) as exc:
            raise self._error(ref, exc) from exc

    async def exists(self, ref: str) -> bool:
        client = await self._open()
        try:
            await client.head_object(Bucket=self.bucket, Key=ref)
        except ClientError as exc:
            if s3.is_not_found(exc):
                return False
            raise self._error(ref, exc) from exc
        except BotoCoreError as exc:
            raise self._error(ref, exc) from exc
        return True

    async def version(self, ref: str) -> tuple[str, str]:
        client = await self._open()
        try:
            head = await client.head_object(Bucket=self.bucket, Key=ref)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(ref, exc) from exc
        modified = head["LastModified"].astimezone(UTC).isoformat(sep=" ")
        etag = str(head["ETag"]).strip('"')
        return f"{etag}:{head['ContentLength']}", modified

    async def size(self, ref: str) -> int:
        client = await self._open()
        try:
            head = await client.head_object(Bucket=self.bucket, Key=ref)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(ref, exc) from exc
        return int(head["ContentLength"])

    async def temp_file(self, ref: str) -> Path:
        def make() -> Path:
            handle, name = tempfile.mkstemp(prefix="setu-file-", suffix=PurePosixPath(ref).suffix)
            os.close(handle)
            return Path(name)

        return await asyncio.to_thread(make)

    async def copy_to(self, ref: str, temp: Path) -> None:
        try:
            await s3.download(await self._open(), self.bucket, ref, temp)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(ref, exc) from exc

    async def commit(self, ref: str, temp: Path) -> None:
        try:
            await s3.upload(await self._open(), self.bucket, ref, temp)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(ref, exc) from exc

    async def test(self, ext: str) -> str:
        client = await self._open()
        try:
            await client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if s3.error_code(exc) in ("404", "NoSuchBucket"):
                where = self.settings.where()
                message = f"bucket {self.bucket} does not exist at {where}"
                raise s3_error(exc, message) from exc
            raise self._error("", exc) from exc
        except BotoCoreError as exc:
            raise self._error("", exc) from exc
        count = len(await self.list_files(ext))
        return f"{count} {ext[1:]} files at {self.where(self.key)}"

    async def close(self) -> None:
        self._client = None
        await self._stack.aclose()
