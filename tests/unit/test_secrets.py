"""The secret store: a file with per-workspace sections, then the environment."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest

from setu_engine.errors import ConfigError
from setu_engine.support.secrets import SecretStore, references
from setu_engine.support.secrets_file import ensure_file, ensure_section, set_secret

WS_A = "0b6f3a1e-0000-4000-8000-00000000000a"
WS_B = "0b6f3a1e-0000-4000-8000-00000000000b"


def store(tmp_path: Path, body: object, environ: dict[str, str] | None = None) -> SecretStore:
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps(body))
    return SecretStore.from_file(path, environ or {})


def test_a_workspace_sees_its_own_section_then_what_is_shared(tmp_path: Path) -> None:
    secrets = store(
        tmp_path,
        {"SHARED": "for-all", "workspaces": {WS_A: {"DB_PASSWORD": "a-only"}}},
        {"SETU_SECRET_FROM_ENV": "env-value"},
    )
    a, b = secrets.for_workspace(WS_A), secrets.for_workspace(WS_B)
    assert a.lookup("DB_PASSWORD") == "a-only"
    assert a.lookup("SHARED") == b.lookup("SHARED") == "for-all"
    assert b.lookup("FROM_ENV") == "env-value"
    with pytest.raises(ConfigError, match="'DB_PASSWORD' is not in this runtime's secret store"):
        b.lookup("DB_PASSWORD")


def test_an_isolated_store_serves_a_workspace_its_section_and_shared_names_only(
    tmp_path: Path,
) -> None:
    path = tmp_path / "secrets.json"
    path.write_text(
        json.dumps({"OPERATOR_PW": "ops", "BUCKET_KEY": "k", "workspaces": {WS_A: {"PW": "a"}}})
    )
    environ = {"SETU_SECRET_ENV_PW": "env", "SETU_SECRET_SHARED_ENV": "yes"}
    cloud = SecretStore.from_file(
        path, environ, isolated=True, shared=frozenset({"BUCKET_KEY", "SHARED_ENV"})
    )
    a, b = cloud.for_workspace(WS_A), cloud.for_workspace(WS_B)
    assert a.lookup("PW") == "a"
    assert (b.lookup("BUCKET_KEY"), b.lookup("SHARED_ENV")) == ("k", "yes")
    for name in ("PW", "OPERATOR_PW", "ENV_PW"):
        with pytest.raises(ConfigError, match=f"workspaces.{WS_B}"):
            b.lookup(name)


def test_resolve_replaces_references_anywhere_and_records_the_values(tmp_path: Path) -> None:
    secrets = store(tmp_path, {"U": "alice", "P": "s3cret"})
    seen: set[str] = set()
    config = {"user": {"$secret": "U"}, "nested": [{"password": {"$secret": "P"}}], "port": 5432}
    assert secrets.resolve(config, seen) == {
        "user": "alice",
        "nested": [{"password": "s3cret"}],
        "port": 5432,
    }
    assert seen == {"alice", "s3cret"}
    assert references(config) == [("config.user", "U"), ("config.nested[0].password", "P")]


@pytest.mark.parametrize(
    "body", [["not", "an", "object"], {"A": 1}, {"workspaces": {WS_A: {"X": 2}}}, {"workspaces": 3}]
)
def test_a_malformed_file_is_refused_at_start(tmp_path: Path, body: object) -> None:
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps(body))
    with pytest.raises(SystemExit, match="secrets file"):
        SecretStore.from_file(path)


def test_the_environment_only_serves_prefixed_names() -> None:
    secrets = SecretStore({}, {"SETU_AGENT_TOKEN": "setu_ag_x", "SETU_SECRET_OK": "yes"})
    assert secrets.lookup("OK") == "yes"
    with pytest.raises(ConfigError):
        secrets.lookup("SETU_AGENT_TOKEN")


def test_a_changed_file_serves_its_new_values_at_the_next_lookup(tmp_path: Path) -> None:
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps({"workspaces": {WS_A: {}}}))
    cloud = SecretStore.from_file(path, {}, isolated=True)
    a = cloud.for_workspace(WS_A)
    with pytest.raises(ConfigError, match="'PW' is not in this workspace's cloud secrets"):
        a.lookup("PW")

    set_secret(path, WS_A, "PW", "first")
    assert a.lookup("PW") == "first"
    # A store made before the change (each task makes its own view) sees it too.
    set_secret(path, WS_A, "PW", "second-value")
    assert (a.lookup("PW"), cloud.for_workspace(WS_A).lookup("PW")) == ("second-value",) * 2


def test_an_invalid_file_keeps_the_last_good_content_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps({"workspaces": {WS_A: {"PW": "good"}}}))
    a = SecretStore.from_file(path, {}, isolated=True).for_workspace(WS_A)
    assert a.lookup("PW") == "good"

    path.write_text('{"workspaces": {"' + WS_A + '": {"PW": "half-writ')
    with caplog.at_level(logging.ERROR):
        assert [a.lookup("PW") for _ in range(3)] == ["good"] * 3
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        "secrets file is invalid; keeping its last good content"
    ]
    assert "half-writ" not in str(errors[0].__dict__)

    path.unlink()
    assert a.lookup("PW") == "good"
    set_secret(path, WS_A, "PW", "fixed")
    assert a.lookup("PW") == "fixed"


def test_the_cloud_error_names_the_command_the_section_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "secrets.json"
    set_secret(path, WS_A, "OTHER", "do-not-quote")
    b = SecretStore.from_file(path, {}, isolated=True).for_workspace(WS_B)
    with pytest.raises(ConfigError) as caught:
        b.lookup("WH_PASSWORD")
    assert str(caught.value) == (
        "secret 'WH_PASSWORD' is not in this workspace's cloud secrets: run "
        f"`setu dev secret set WH_PASSWORD` (dev server), or add it under workspaces.{WS_B} "
        f"in {path}"
    )


def test_secrets_are_written_atomically_private_and_beside_what_was_there(
    tmp_path: Path,
) -> None:
    path = tmp_path / "dev" / "secrets.json"
    ensure_file(path)
    assert json.loads(path.read_text()) == {"workspaces": {}}
    path.write_text(json.dumps({"OPS": "x", "workspaces": {WS_B: {"K": "b"}}}))
    ensure_section(path, WS_A)
    set_secret(path, WS_A, "PW", "p")
    assert json.loads(path.read_text()) == {
        "OPS": "x",
        "workspaces": {WS_B: {"K": "b"}, WS_A: {"PW": "p"}},
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["secrets.json"]
