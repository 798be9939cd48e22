"""The `duckdb` provider: the connector (the `duckdb` module in a worker
thread, batches ingested through Arrow) and the modules it is made of
(types, arrays, write, failures). The registry reads `PROVIDER` from here.

Its drivers are the `duckdb` extra's (duckdb, pyarrow): a runtime installed
without it meets a ConfigError naming the extra, not an ImportError."""

from __future__ import annotations

from setu_engine.errors import ConfigError

try:
    from setu_engine.providers.duckdb.connector import PROVIDER
except ImportError as exc:
    if exc.name not in ("duckdb", "pyarrow"):
        raise
    raise ConfigError(
        f"the duckdb provider needs {exc.name}, which this runtime lacks: install "
        f"setu[duckdb] (pip install 'setu[duckdb]')"
    ) from exc

__all__ = ["PROVIDER"]
