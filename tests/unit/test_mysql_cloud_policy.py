"""The cloud's rules for a mysql connection (setu_agent/cloud/policy.py):
a host is required and reached over TCP only; on an agent (LocalReach)
the config passes as it is. The address itself is vetted by egress in the
connector's connect (tests/integration/test_mysql_provider.py)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from setu_agent.cloud.policy import CloudPolicy, LocalReach
from setu_engine.errors import ConfigError

BASE: dict[str, Any] = {"database": "shop", "user": "reader", "password": {"$secret": "PW"}}


def policy(tmp_path: Path) -> CloudPolicy:
    return CloudPolicy(tmp_path).for_workspace(uuid.uuid4())


@pytest.mark.parametrize("host", [None, "", "   ", 7])
def test_a_cloud_mysql_connection_must_name_its_host(tmp_path: Path, host: Any) -> None:
    config = BASE if host is None else BASE | {"host": host}
    with pytest.raises(ConfigError, match=r"config\.host: required in the cloud"):
        policy(tmp_path)("mysql", config)


@pytest.mark.parametrize("host", ["/run/mysqld/mysqld.sock", "@mysql", "/tmp"])
def test_a_unix_socket_is_refused_in_the_cloud(tmp_path: Path, host: str) -> None:
    with pytest.raises(ConfigError, match=r"config\.host: .*over TCP only"):
        policy(tmp_path)("mysql", BASE | {"host": host})


def test_a_named_host_passes_unchanged_for_egress_to_vet(tmp_path: Path) -> None:
    config = BASE | {"host": "db.example.com", "port": 3306}
    assert policy(tmp_path)("mysql", config) == config


def test_an_agents_reach_leaves_a_socket_path_alone(tmp_path: Path) -> None:
    config = BASE | {"host": "/run/mysqld/mysqld.sock"}
    assert LocalReach(tmp_path).for_workspace(uuid.uuid4())("mysql", config) == config
