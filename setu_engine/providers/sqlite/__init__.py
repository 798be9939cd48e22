"""The `sqlite` provider: the connector (the standard library's sqlite3 in a
worker thread) and the modules it is made of (shape, stage, values). The
registry reads `PROVIDER` from here."""

from __future__ import annotations

from setu_engine.providers.sqlite.connector import PROVIDER

__all__ = ["PROVIDER"]
