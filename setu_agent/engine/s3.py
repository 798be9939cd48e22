"""The one place that builds S3 clients (aiobotocore), and the few object
operations the blob store and the file provider share."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import ClientError  # type: ignore[import-untyped]

# S3 needs every part but the last to be at least 5 MiB; above this size an
# upload goes in parts so no single request carries the whole file.
MULTIPART_THRESHOLD = 64 * 1024 * 1024
PART_SIZE = 16 * 1024 * 1024
READ_CHUNK = 1024 * 1024

NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str = ""
    region: str = "us-east-1"
    access_key_id: str = ""
    secret_access_key: str = ""
    session_token: str = ""

    def where(self) -> str:
        """Where the objects live, for error messages."""
        return self.endpoint_url or f"AWS S3 ({self.region or 'default region'})"


def s3_client(settings: S3Settings) -> AbstractAsyncContextManager[Any]:
    """An S3 client as an async context manager. Credentials come from the
    settings when given, else from botocore's default chain (environment,
    profile, instance role)."""
    # A custom endpoint (MinIO, moto, Ceph) rarely has wildcard DNS for
    # virtual-hosted buckets, so address it by path.
    config = AioConfig(
        retries={"max_attempts": 5, "mode": "standard"},
        s3={"addressing_style": "path"} if settings.endpoint_url else None,
    )
    kwargs: dict[str, Any] = {"region_name": settings.region or None, "config": config}
    if settings.endpoint_url:
        kwargs["endpoint_url"] = settings.endpoint_url
    if settings.access_key_id:
        kwargs["aws_access_key_id"] = settings.access_key_id
        kwargs["aws_secret_access_key"] = settings.secret_access_key
        kwargs["aws_session_token"] = settings.session_token or None
    client: AbstractAsyncContextManager[Any] = get_session().create_client("s3", **kwargs)
    return client


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/key/prefix` -> (bucket, key); raises ValueError."""
    if not url.startswith("s3://"):
        raise ValueError(f"{url!r} is not an S3 URL: expected s3://bucket/key")
    bucket, _, key = url[len("s3://") :].partition("/")
    if not _BUCKET.match(bucket):
        raise ValueError(
            f"{url!r} has no valid bucket name: expected s3://bucket/key with a bucket of "
            f"letters, digits, '.', '-' and '_'"
        )
    return bucket, key


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def error_message(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    return f"{error.get('Code', 'error')}: {error.get('Message', '') or str(exc)}"


def is_not_found(exc: ClientError) -> bool:
    return error_code(exc) in NOT_FOUND_CODES


async def iter_lines(client: Any, bucket: str, key: str) -> AsyncGenerator[list[bytes], None]:
    """An object's lines (split on b"\\n", endings kept) in chunks, streamed
    from the response body so the object is never whole in memory."""
    response = await client.get_object(Bucket=bucket, Key=key)
    async with response["Body"] as body:
        rest = b""
        async for chunk in body.iter_chunks(READ_CHUNK):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            if lines:
                yield [line + b"\n" for line in lines]
        if rest:
            yield [rest]


async def download(client: Any, bucket: str, key: str, path: Path) -> None:
    """Streams an object into a local file (appending)."""
    response = await client.get_object(Bucket=bucket, Key=key)
    async with response["Body"] as body:
        with path.open("ab") as out:
            async for chunk in body.iter_chunks(READ_CHUNK):
                await asyncio.to_thread(out.write, chunk)


async def upload(client: Any, bucket: str, key: str, path: Path) -> None:
    """Puts a local file as one object; readers see the old object or the new
    one, never a part (S3 makes an object visible only once complete)."""
    size = (await asyncio.to_thread(path.stat)).st_size
    if size <= MULTIPART_THRESHOLD:
        data = await asyncio.to_thread(path.read_bytes)
        await client.put_object(Bucket=bucket, Key=key, Body=data)
        return
    upload_id = (await client.create_multipart_upload(Bucket=bucket, Key=key))["UploadId"]
    try:
        parts = await _upload_parts(client, bucket, key, upload_id, path)
        await client.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
        )
    except BaseException:
        await asyncio.shield(
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        )
        raise


async def _upload_parts(
    client: Any, bucket: str, key: str, upload_id: str, path: Path
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    with path.open("rb") as source:
        number = 1
        while chunk := await asyncio.to_thread(source.read, PART_SIZE):
            answer = await client.upload_part(
                Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=chunk
            )
            parts.append({"PartNumber": number, "ETag": answer["ETag"]})
            number += 1
    return parts
