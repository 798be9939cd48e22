"""The blob store's contract, on a local folder and on a real S3 server (moto)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from setu_engine.errors import BlobError, BlobNotFound
from setu_engine.staged.blob import BlobSettings, BlobStore, LocalBlobStore, open_blob
from tests.s3server import S3Endpoint

PREFIX = "ws/1/pl/2/run/3/"


@pytest.fixture(params=["local", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    if request.param == "local":
        blob = open_blob(BlobSettings(backend="local", root=str(tmp_path / "blobs")))
    else:
        s3: S3Endpoint = request.getfixturevalue("s3_endpoint")
        bucket = await s3.make_bucket()
        settings = BlobSettings(backend="s3", root=bucket, endpoint_url=s3.endpoint_url)
        blob = open_blob(settings, s3.settings)
    try:
        yield blob
    finally:
        await blob.close()


async def test_put_then_get_exists_and_list(store: BlobStore) -> None:
    await store.put(PREFIX + "users/part-00001.pgcopy.zst", b"second")
    await store.put(PREFIX + "users/part-00000.pgcopy.zst", b"first")
    await store.put(PREFIX + "manifest.json", b"{}")
    await store.put("ws/1/pl/2/run/30/manifest.json", b"other run")

    assert await store.get(PREFIX + "users/part-00000.pgcopy.zst") == b"first"
    assert await store.exists(PREFIX + "manifest.json")
    assert not await store.exists(PREFIX + "missing.json")
    assert await store.list(PREFIX) == [
        PREFIX + "manifest.json",
        PREFIX + "users/part-00000.pgcopy.zst",
        PREFIX + "users/part-00001.pgcopy.zst",
    ]
    # A prefix is a string prefix, as in S3, not only a folder.
    assert await store.list(PREFIX + "users/part-0000") == [
        PREFIX + "users/part-00000.pgcopy.zst",
        PREFIX + "users/part-00001.pgcopy.zst",
    ]
    assert await store.list("ws/9/") == []


async def test_put_replaces_an_object(store: BlobStore) -> None:
    await store.put(PREFIX + "manifest.json", b"old")
    await store.put(PREFIX + "manifest.json", b"new")
    assert await store.get(PREFIX + "manifest.json") == b"new"


async def test_get_of_a_missing_key_is_not_found(store: BlobStore) -> None:
    with pytest.raises(BlobNotFound, match=r"manifest\.json"):
        await store.get(PREFIX + "manifest.json")


async def test_delete_prefix_removes_only_keys_under_it(store: BlobStore) -> None:
    for index in range(3):
        await store.put(f"{PREFIX}users/part-{index:05}", b"x")
    await store.put("ws/1/pl/2/run/4/manifest.json", b"keep")

    assert await store.delete_prefix(PREFIX) == 3
    assert await store.list(PREFIX) == []
    assert await store.list("ws/") == ["ws/1/pl/2/run/4/manifest.json"]
    assert await store.delete_prefix(PREFIX) == 0


async def test_delete_prefix_batches_more_than_a_thousand_keys(store: BlobStore) -> None:
    await asyncio.gather(*(store.put(f"{PREFIX}p/{i:05}", b"") for i in range(1005)))
    assert await store.delete_prefix(PREFIX) == 1005
    assert await store.list(PREFIX) == []


@pytest.mark.parametrize(
    "key", ["/etc/passwd", "../outside", "a/../../b", "a//b", "a\\b", "a/", "", "./a"]
)
async def test_keys_that_could_escape_the_root_are_rejected(
    store: BlobStore, key: str, tmp_path: Path
) -> None:
    with pytest.raises(BlobError, match="invalid blob key"):
        await store.put(key, b"x")
    with pytest.raises(BlobError, match="invalid blob key"):
        await store.get(key)
    assert not (tmp_path / "outside").exists()


async def test_local_delete_prefix_leaves_no_empty_folders(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    await store.put(PREFIX + "users/part-00000", b"x")
    await store.delete_prefix("ws/1/")
    assert os.listdir(tmp_path) == []


async def test_local_put_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    await store.put("a/b.bin", b"1" * 10_000)
    await store.put("a/b.bin", b"2" * 10_000)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b.bin"]


async def test_local_readers_never_see_a_partial_object(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    old, new = b"o" * 4_000_000, b"n" * 4_000_000
    await store.put("big.bin", old)

    async def read_until_replaced() -> set[bytes]:
        seen: set[bytes] = set()
        while True:
            data = await store.get("big.bin")
            seen.add(data)
            if data == new:
                return seen

    reader = asyncio.create_task(read_until_replaced())
    await store.put("big.bin", new)
    assert (await reader) <= {old, new}


async def test_local_list_skips_a_put_in_progress(tmp_path: Path) -> None:
    # The state a crash mid-put leaves behind: a temporary beside the target.
    store = LocalBlobStore(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.bin.setu-tmp-0123456789abcdef0123456789abcdef").write_bytes(b"part")
    assert await store.list("") == []
    assert not await store.exists("a/b.bin")


async def test_s3_missing_bucket_is_named_in_the_error(s3_endpoint: S3Endpoint) -> None:
    settings = BlobSettings(backend="s3", root="setu-no-such-bucket")
    store = open_blob(settings, s3_endpoint.settings)
    try:
        with pytest.raises(BlobError, match=r"bucket setu-no-such-bucket does not exist at http"):
            await store.put("a", b"x")
        with pytest.raises(BlobError, match=r"bucket setu-no-such-bucket does not exist"):
            await store.list("")
    finally:
        await store.close()


async def test_s3_credentials_come_from_the_environment_when_not_given(
    s3_endpoint: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3_endpoint.env.items():
        monkeypatch.setenv(name, value)
    bucket = await s3_endpoint.make_bucket()
    store = open_blob(
        BlobSettings(backend="s3", root=bucket, endpoint_url=s3_endpoint.endpoint_url)
    )
    try:
        await store.put("k", b"v")
        assert await store.get("k") == b"v"
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (BlobSettings(backend="gcs", root="x"), "unknown blob backend 'gcs'"),
        (BlobSettings(backend="local"), "needs a root"),
        (BlobSettings(backend="s3"), "needs a root"),
    ],
)
def test_open_blob_rejects_bad_settings(settings: BlobSettings, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_blob(settings)


def test_local_root_is_the_folder(tmp_path: Path) -> None:
    store = open_blob(BlobSettings(backend="local", root=os.fspath(tmp_path)))
    assert isinstance(store, LocalBlobStore)
    assert store.root == tmp_path
