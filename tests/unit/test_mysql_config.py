"""The mysql provider's validate_config (no server): what it takes, and
every refusal naming the field at fault."""

from __future__ import annotations

from typing import Any

import pytest

from setu_engine.errors import ConfigError
from setu_engine.providers import get_provider

SECRET = {"$secret": "MYSQL_PASSWORD"}
GOOD: dict[str, Any] = {
    "host": "db.example.com",
    "port": 3306,
    "database": "shop",
    "user": "reader",
    "password": SECRET,
    "ssl": "verify-full",
    "connect_timeout": 5,
}


def validate(config: dict[str, Any]) -> None:
    get_provider("mysql").validate_config(config)


@pytest.mark.parametrize(
    "config",
    [
        GOOD,
        {"database": "shop", "user": "reader"},  # host localhost, no password
        GOOD | {"host": {"$secret": "DB_HOST"}, "user": {"$secret": "DB_USER"}},
        GOOD | {"database": {"$secret": "DB_NAME"}},
        GOOD | {"ssl": "disable", "port": 1, "connect_timeout": 300},
        GOOD | {"host": "/run/mysqld/mysqld.sock"},
    ],
)
def test_valid_configs_pass(config: dict[str, Any]) -> None:
    validate(config)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({k: v for k, v in GOOD.items() if k != "user"}, "config.user"),
        ({k: v for k, v in GOOD.items() if k != "database"}, "config.database"),
        (GOOD | {"user": ""}, "config.user"),
        (GOOD | {"user": "  "}, "config.user"),
        (GOOD | {"database": 7}, "config.database"),
        (GOOD | {"host": ""}, "config.host"),
        (GOOD | {"host": None}, "config.host"),
        (GOOD | {"port": 0}, "config.port"),
        (GOOD | {"port": 65536}, "config.port"),
        (GOOD | {"port": "3306"}, "config.port"),
        (GOOD | {"port": True}, "config.port"),
        (GOOD | {"port": 3306.5}, "config.port"),
        (GOOD | {"ssl": "on"}, "config.ssl"),
        (GOOD | {"ssl": True}, "config.ssl"),
        (GOOD | {"connect_timeout": 0}, "config.connect_timeout"),
        (GOOD | {"connect_timeout": 301}, "config.connect_timeout"),
        (GOOD | {"connect_timeout": "10"}, "config.connect_timeout"),
        (GOOD | {"password": {"$secret": ""}}, "config.password"),
        (GOOD | {"user": {"$secret": "x", "extra": 1}}, "config.user"),
    ],
)
def test_invalid_configs_name_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        validate(config)


@pytest.mark.parametrize("password", ["hunter2-plain", 12345, ""])
def test_a_plain_password_is_refused_without_echoing_it(password: Any) -> None:
    refused = r"config\.password: must be a secret reference"
    with pytest.raises(ConfigError, match=refused) as caught:
        validate(GOOD | {"password": password})
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("key", ["schema", "unix_socket", "read_default_file", "charset"])
def test_unknown_fields_are_listed_with_the_known_ones(key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate(GOOD | {key: "x"})
    message = str(caught.value)
    assert key in message
    for known in ("host", "port", "database", "user", "password", "ssl", "connect_timeout"):
        assert known in message
