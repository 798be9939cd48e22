from __future__ import annotations

import argparse
from pathlib import Path

from setu_server.config import Settings


def test_environment_then_flags() -> None:
    env = {"SETU_LISTEN": "0.0.0.0:9000", "SETU_WAIT_CAP_SECONDS": "30", "SETU_DATA_DIR": "/d"}
    parser = argparse.ArgumentParser()
    Settings.add_arguments(parser)
    settings = Settings.from_args(parser.parse_args(["--listen", "127.0.0.1:1"]), env)
    assert settings.listen == "127.0.0.1:1"
    assert settings.wait_cap_seconds == 30.0
    assert settings.data_dir == Path("/d")
    assert settings.embedded_pg_dir == Path("/d/pg")


def test_defaults_embed_everything() -> None:
    settings = Settings.from_env({})
    assert settings.database_url == ""
    assert settings.wait_cap_seconds == 60.0
    assert settings.lease_wait_cap_seconds == 30.0
    assert settings.blob_root == str(Path(".setu") / "blobs")
