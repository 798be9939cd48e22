"""The one place that builds S3 clients (aiobotocore), and the few object
operations the blob store and the file provider share.

aiobotocore (with botocore and aiohttp) is the `s3` extra: an agent that
stages in a folder and reads no S3 file runs without it, so it is imported
when a client is built, and the client says which extra is missing."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from setu_engine.errors import ConfigError
from setu_engine.support.egress import Egress

# S3 needs every part but the last to be at least 5 MiB; above this size an
# upload goes in parts so no single request carries the whole file.
MULTIPART_THRESHOLD = 64 * 1024 * 1024
PART_SIZE = 16 * 1024 * 1024
READ_CHUNK = 1024 * 1024

NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")
MISSING_EXTRA = "S3 needs the s3 extra, which this install lacks: pip install 'setu[s3]'"

try:
    # Re-exported: the blob store and the file provider catch them from here.
    from botocore.exceptions import (  # type: ignore[import-untyped]
        BotoCoreError as BotoCoreError,
    )
    from botocore.exceptions import (
        ClientError as ClientError,
    )
except ImportError:  # no s3 extra: no client can be built, so nothing raises these

    class BotoCoreError(Exception):  # type: ignore[no-redef]
        """Stands in for botocore's, which an install without S3 never raises."""

    class ClientError(Exception):  # type: ignore[no-redef]
        """Stands in for botocore's, which an install without S3 never raises."""

        response: dict[str, Any] = {}


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str = ""
    region: str = "us-east-1"
    access_key_id: str = ""
    secret_access_key: str = ""
    session_token: str = ""
    # A tenant's connection in the cloud: every address vetted, and nothing
    # taken from the process (credential chain, configured endpoints).
    egress: Egress | None = field(default=None, compare=False)
    ambient_credentials: bool = True

    def where(self) -> str:
        """Where the objects live, for error messages."""
        return self.endpoint_url or f"AWS S3 ({self.region or 'default region'})"


def s3_client(settings: S3Settings) -> AbstractAsyncContextManager[Any]:
    """An S3 client as an async context manager. Credentials come from the
    settings when given, else (`ambient_credentials`) from botocore's default
    chain (environment, profile, instance role), else none: unsigned.
    Raises ConfigError when the s3 extra is not installed."""
    try:
        from aiobotocore.config import AioConfig
        from aiobotocore.session import get_session
        from botocore import UNSIGNED  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ConfigError(MISSING_EXTRA) from exc
    options: dict[str, Any] = {}
    if settings.egress is not None:
        options["connector_args"] = {"resolver": _vetted_resolver()(settings.egress)}
    if not settings.ambient_credentials:
        options["ignore_configured_endpoint_urls"] = True
        if not settings.access_key_id:
            options["signature_version"] = UNSIGNED
    # A custom endpoint (MinIO, moto, Ceph) rarely has wildcard DNS for
    # virtual-hosted buckets, so address it by path.
    config = AioConfig(
        retries={"max_attempts": 5, "mode": "standard"},
        s3={"addressing_style": "path"} if settings.endpoint_url else None,
        **options,
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


async def vet_endpoint(settings: S3Settings) -> None:
    """Checks a custom endpoint's host now: aiohttp never asks the resolver
    about an IP literal, so the resolver alone would miss `127.0.0.1`."""
    if settings.egress is None or not settings.endpoint_url:
        return
    parts = urlsplit(settings.endpoint_url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ConfigError(f"config.endpoint_url: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("config.endpoint_url: an http:// or https:// URL with a host")
    await settings.egress.address(parts.hostname, port, "config.endpoint_url")


@cache
def _vetted_resolver() -> type[Any]:
    """The resolver class, made once when the first vetted client is built
    (aiohttp comes with the s3 extra)."""
    from aiohttp.abc import AbstractResolver, ResolveResult

    class _VettedResolver(AbstractResolver):
        """aiohttp's name lookup through an Egress: the endpoint's host is
        resolved and checked once, and the socket goes to that address (TLS
        still verifies the name)."""

        def __init__(self, egress: Egress) -> None:
            self._egress = egress

        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            address = await self._egress.address(host, port, "config.endpoint_url")
            return [
                ResolveResult(
                    hostname=host,
                    host=address,
                    port=port,
                    family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
            ]

        async def close(self) -> None:
            return None

    return _VettedResolver


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
