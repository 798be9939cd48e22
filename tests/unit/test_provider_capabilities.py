"""Each provider's declared capabilities (setu_engine/capabilities.py)
against what its connector implements: a flag the transfer reads is on
exactly when the connector has the protocol that flag stands for, so a
declaration cannot drift from the code. Connectors are built on stand-ins
for their driver's session (nothing is opened)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from setu_agent.cloud.connections import Reusable
from setu_engine.capabilities import ROWS_ONLY, Capabilities, capabilities_of
from setu_engine.movement.transfer import (
    CsvDestination,
    CsvSource,
    JsonLinesDestination,
    JsonLinesSource,
)
from setu_engine.planning.destination_plan import InspectableDestination
from setu_engine.planning.incremental import CursorSource, ObjectSource
from setu_engine.providers import NAMES, get_provider
from setu_engine.providers.base import (
    CopyDestination,
    CopySource,
    CountsRows,
    ResumableCopies,
    ResumableRows,
)
from setu_engine.providers.duckdb.connector import DuckdbConnector
from setu_engine.providers.files.connector import FileConnector
from setu_engine.providers.files.storage import _LocalFiles
from setu_engine.providers.mysql.connector import MysqlConnector
from setu_engine.providers.postgres.connector import PostgresConnector
from setu_engine.providers.sqlite.connector import SqliteConnector
from setu_engine.staged.resumable import StagingDestination

# Each boolean flag and the protocol its connector then implements.
PROTOCOLS: dict[str, type] = {
    "copy_out": CopySource,
    "copy_in": CopyDestination,
    "json_lines_out": JsonLinesSource,
    "json_lines_in": JsonLinesDestination,
    "csv_out": CsvSource,
    "csv_in": CsvDestination,
    "resumable_rows": ResumableRows,
    "resumable_copies": ResumableCopies,
    "counts_rows": CountsRows,
    "staged_loads": StagingDestination,
    "inspectable": InspectableDestination,
    "reusable_sessions": Reusable,
}
INCREMENTS: dict[str, type] = {"cursor": CursorSource, "object": ObjectSource}


def connectors() -> dict[str, Any]:
    unopened: Any = object()
    return {
        "postgres": PostgresConnector(unopened, "public", "nowhere"),
        "sqlite": SqliteConnector(Path("unopened.sqlite"), unopened, writable=False),
        "file": FileConnector(
            SimpleNamespace(format="csv"),  # type: ignore[arg-type]
            _LocalFiles(Path("unopened"), single=False),
        ),
        "duckdb": DuckdbConnector(Path("unopened.duckdb"), unopened, "main", writable=False),
        "mysql": MysqlConnector(
            unopened, "db", "10.11.0-MariaDB", local_infile=False, where="nowhere"
        ),
    }


def test_every_provider_has_a_connector_here() -> None:
    assert set(connectors()) == set(NAMES)


@pytest.mark.parametrize("provider", NAMES)
def test_the_provider_declares_what_its_connector_declares(provider: str) -> None:
    declared = get_provider(provider).capabilities
    assert isinstance(declared, Capabilities)
    assert capabilities_of(connectors()[provider]) is declared


@pytest.mark.parametrize("flag", sorted(PROTOCOLS))
@pytest.mark.parametrize("provider", NAMES)
def test_a_flag_is_on_exactly_when_the_connector_implements_it(provider: str, flag: str) -> None:
    connector = connectors()[provider]
    declared = getattr(capabilities_of(connector), flag)
    implements = isinstance(connector, PROTOCOLS[flag])
    assert declared == implements, (provider, flag, PROTOCOLS[flag].__name__)


@pytest.mark.parametrize("provider", NAMES)
def test_increments_name_the_protocol_the_connector_implements(provider: str) -> None:
    connector = connectors()[provider]
    implemented = [kind for kind, protocol in INCREMENTS.items() if isinstance(connector, protocol)]
    declared = capabilities_of(connector).increments
    assert implemented == ([declared] if declared else []), (provider, declared)


def test_a_connector_that_declares_nothing_only_moves_rows() -> None:
    assert capabilities_of(SimpleNamespace()) is ROWS_ONLY
    assert not any(getattr(ROWS_ONLY, flag) for flag in PROTOCOLS)
    assert ROWS_ONLY.increments is None
