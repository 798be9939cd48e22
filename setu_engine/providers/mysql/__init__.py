"""The `mysql` provider (MySQL 8 and MariaDB 10.11+): the connector
(asyncmy; connector.py), its type mapping (types.py), its write side
(write.py, infile.py) and its error rules (failures.py). The registry reads
`PROVIDER` from here."""

from __future__ import annotations

from setu_engine.providers.mysql.connector import PROVIDER

__all__ = ["PROVIDER"]
