from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from setu_server.config import (
    JanitorSettings,
    LeasePolicy,
    ReaperSettings,
    Settings,
    SettingsError,
)


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


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"admin_token": "short"}, "SETU_ADMIN_TOKEN must be at least 16 characters"),
        ({"worker_token": "short"}, "SETU_WORKER_TOKEN must be at least 16 characters"),
        ({"blob_url": "s3://bucket/folder"}, "SETU_BLOB_URL wants s3://BUCKET, got "),
        ({"cloud_reach": "anywhere"}, "SETU_CLOUD_REACH is restricted or local, not 'anywhere'"),
        ({"tls_cert": "c.pem"}, "SETU_TLS_CERT is set but SETU_TLS_KEY is not"),
        ({"tls_client_ca": "ca.pem"}, "SETU_TLS_CLIENT_CA needs SETU_TLS_CERT"),
        ({"worker_client_cert": "w.pem"}, "SETU_WORKER_CLIENT_CERT and SETU_WORKER_CLIENT_KEY go"),
    ],
)
def test_unusable_settings_are_refused_when_built(values: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)) as refused:
        Settings().updated(**values)
    # An error a caller can catch as ValueError, which still ends the process
    # with its message as the SystemExit of before did.
    assert isinstance(refused.value, ValueError) and isinstance(refused.value, SystemExit)
    with pytest.raises(SettingsError, match=re.escape(message)):
        Settings.from_env({Settings.env_name(name): value for name, value in values.items()})
