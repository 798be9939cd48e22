"""In the cloud (a files root), a link beside the DuckDB file where DuckDB
writes its log (`<file>.wal`) or spills (`<file>.tmp`) is refused before
the file is opened: DuckDB writes through it and would overwrite whatever
it leads to (another workspace's file)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from setu_engine.errors import ConfigError
from setu_engine.providers import get_provider

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("suffix", [".wal", ".tmp"])
async def test_linked_sidefile_is_refused_and_its_target_kept(tmp_path: Path, suffix: str) -> None:
    root = tmp_path / "workspace"
    root.mkdir()
    path = root / "mine.duckdb"
    with duckdb.connect(str(path)) as made:
        made.execute("CREATE TABLE t (x integer)")
    victim = tmp_path / "elsewhere"
    victim.write_bytes(b"another workspace's data\n")
    (root / f"mine.duckdb{suffix}").symlink_to(victim)
    with pytest.raises(ConfigError, match=f"mine.duckdb{suffix}"):
        await get_provider("duckdb").connect({"path": str(path), "create": True}, root=root)
    assert victim.read_bytes() == b"another workspace's data\n"
