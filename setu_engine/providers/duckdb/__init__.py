"""The `duckdb` provider: the connector (the `duckdb` module in a worker
thread, batches ingested through Arrow) and the modules it is made of
(types, arrays, write, failures). The registry reads `PROVIDER` from here."""

from __future__ import annotations

from setu_engine.providers.duckdb.connector import PROVIDER

__all__ = ["PROVIDER"]
