"""The `mysql` provider (MySQL 8 and MariaDB 10.11+): the connector
(asyncmy; connector.py, its session guarded against a hostile server by
wire.py), its type mapping (types.py), its write side (write.py, infile.py)
and its error rules (failures.py). The registry reads `PROVIDER` from here.

Its driver is the `mysql` extra's (asyncmy): a runtime installed without it
meets a ConfigError naming the extra, not an ImportError."""

from __future__ import annotations

from setu_engine.errors import ConfigError

try:
    from setu_engine.providers.mysql.connector import PROVIDER
except ImportError as exc:
    if exc.name != "asyncmy":
        raise
    raise ConfigError(
        "the mysql provider needs asyncmy, which this runtime lacks: install "
        "setu[mysql] (pip install 'setu[mysql]')"
    ) from exc

__all__ = ["PROVIDER"]
