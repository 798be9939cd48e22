"""config.parquet of the `file` provider, apart from parquet.py: a connection's
config is read (and checked) on a host without pyarrow, the `parquet` extra,
which only reading or writing a Parquet file needs."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from setu_engine.errors import ConfigError

COMPRESSIONS = ("zstd", "snappy", "gzip", "lz4", "brotli", "none")
OPTIONS = ("compression", "row_group_rows")
MISSING_EXTRA = (
    "Parquet files need pyarrow, the parquet extra, which this install lacks: "
    "pip install 'setu[parquet]'"
)


@dataclass(frozen=True)
class ParquetOptions:
    compression: str = "zstd"
    row_group_rows: int = 100_000


def parse_options(options: Any) -> ParquetOptions:
    """config.parquet's meaning; raises ConfigError naming the key at fault."""
    if not isinstance(options, dict):
        raise ConfigError(f"config.parquet must be an object with any of {', '.join(OPTIONS)}")
    if extra := sorted(set(options) - set(OPTIONS)):
        raise ConfigError(
            f"config.parquet.{extra[0]} is not a Parquet option; use {', '.join(OPTIONS)}"
        )
    compression = options.get("compression", "zstd")
    if compression not in COMPRESSIONS:
        raise ConfigError(f"config.parquet.compression must be one of {', '.join(COMPRESSIONS)}")
    rows = options.get("row_group_rows", 100_000)
    if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= 10_000_000:
        raise ConfigError("config.parquet.row_group_rows must be a number from 1 to 10000000")
    return ParquetOptions(compression, rows)


def require_pyarrow() -> None:
    """Raises ConfigError naming the extra when pyarrow is not installed;
    call it before importing parquet.py."""
    if importlib.util.find_spec("pyarrow") is None:
        raise ConfigError(MISSING_EXTRA)
