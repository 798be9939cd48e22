"""The `postgres` provider: the connector (asyncpg, binary COPY at both ends)
and the modules it is made of (json, shape, stage). The registry reads
`PROVIDER` from here."""

from __future__ import annotations

from setu_engine.providers.postgres.connector import PROVIDER

__all__ = ["PROVIDER"]
