"""The `file` provider: the connector (CSV, JSON Lines and Parquet files in a
local folder or under an S3 prefix) and the modules it is made of (codec,
csv, encode, merge, parquet, storage, s3_ranges, arrays). The registry reads
`PROVIDER` from here."""

from __future__ import annotations

from setu_engine.providers.files.connector import PROVIDER

__all__ = ["PROVIDER"]
