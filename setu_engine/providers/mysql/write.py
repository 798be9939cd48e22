"""The mysql provider's write side (stub: the methods land next)."""

from __future__ import annotations

from typing import Any


class MysqlWrites:
    """The write side of MysqlConnector (connector.py), a mixin: it relies on
    the connector's attributes below."""

    conn: Any  # the asyncmy Connection, autocommit off
    database: str
    flavour: str  # "mariadb" or "mysql"
    version: tuple[int, ...]
    local_infile: bool  # server's @@local_infile is ON and infile's guard is installed
