from __future__ import annotations

import argparse
from pathlib import Path

from setu_server.config import JanitorSettings, LeasePolicy, ReaperSettings, Settings


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


def test_the_flat_names_users_set_land_in_the_sections_services_take() -> None:
    env = {"SETU_LEASE_TTL_SECONDS": "5", "SETU_STAGED_RETENTION_HOURS": "2"}
    parser = argparse.ArgumentParser()
    Settings.add_arguments(parser)
    args = parser.parse_args(["--reaper-interval-seconds", "0.5", "--outage-free-retries", "3"])
    settings = Settings.from_args(args, env)
    assert settings.leasing == LeasePolicy(ttl_seconds=5.0, outage_free_retries=3)
    assert settings.janitor == JanitorSettings(retention_seconds=7200.0)
    assert settings.reaper == ReaperSettings(interval_seconds=0.5)
    assert settings.staged_retention_hours == 2.0
    assert Settings().updated(listen_fallback_seconds=0.1).fallback.interval_seconds == 0.1
