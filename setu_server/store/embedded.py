"""PostgreSQL from the `pgserver` package, for when no database URL is given.

The server keeps its data in a folder that outlives the process: the next
start reuses it. pgserver shares one postmaster between every process that
opens the same folder and stops it when the last one leaves.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
# pgserver narrates every pg_ctl call at INFO; its warnings are what matter.
logging.getLogger("pgserver").setLevel(logging.WARNING)

DATABASE = "setu"


class EmbeddedPostgres:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._server: Any = None

    async def start(self) -> str:
        """Start (or join) the server; returns the URL of the `setu` database."""
        return await asyncio.to_thread(self._start)

    def _start(self) -> str:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; /tmp is fine here.
            warnings.simplefilter("ignore")
            import pgserver  # type: ignore[attr-defined,unused-ignore]

        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._server = pgserver.get_server(  # type: ignore[attr-defined]
            self.data_dir, cleanup_mode="stop"
        )
        exists = self._server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}';")
        if "(0 rows)" in exists:
            # Two processes may race here; the loser's error is harmless.
            self._server.psql(f"CREATE DATABASE {DATABASE};")
        url: str = self._server.get_uri(DATABASE)
        log.info("embedded postgres ready", extra={"data_dir": str(self.data_dir)})
        return url

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            await asyncio.to_thread(server.cleanup)
