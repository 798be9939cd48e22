"""A pipeline checked against its source's catalog, at create and update.

When the source connection was discovered (its catalog is known), the
pipeline's streams, its operator chain's columns and its keys are checked
with the engine's own code (setu_engine/movement/transfer.py `select_streams`,
setu_engine/movement/dry_run.py `plan`), so the message is the one a run or a dry run
would give. A source never discovered is not checked: nothing is known yet.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from setu_client.errors import InvalidArgument
from setu_engine.errors import ConfigError, ProviderError, SpecError, SyncError, TypeNameError
from setu_engine.kinds import WriteMode
from setu_engine.movement import dry_run, transfer
from setu_engine.operators.chain import parse_spec
from setu_engine.planning import incremental
from setu_engine.planning.plans import incompatibilities
from setu_engine.values.types import Column, Stream
from setu_server.store import catalog
from setu_server.store.db import Executor

# Where the message says the check came from.
FROM_CATALOG = "checked against the source connection's discovered catalog"


async def check_against_catalog(
    db: Executor,
    source_connection_id: UUID,
    streams: list[str],
    spec: dict[str, Any],
    write_mode: WriteMode,
) -> None:
    """INVALID_ARGUMENT naming every stream, column or key the source's
    catalog says a run would not find; nothing when it was never discovered."""
    offered = [_stream(s) for s in await catalog.offered_streams(db, source_connection_id)]
    if not offered:
        return
    try:
        chosen = transfer.select_streams(offered, streams)
    except ProviderError as exc:
        raise InvalidArgument(f"streams: {exc} ({FROM_CATALOG})") from None
    try:
        parsed = parse_spec(spec)
    except SpecError as exc:
        raise InvalidArgument(str(exc)) from None
    try:
        rules = incremental.parse_sync(spec)
        incremental.check(
            rules, chosen, merge=write_mode == "merge", overwrite=write_mode == "overwrite"
        )
    except (ConfigError, SyncError) as exc:
        raise InvalidArgument(f"{exc} ({FROM_CATALOG})") from None
    chosen = [incremental.as_planned(rules, stream) for stream in chosen]
    planned = dry_run.plan(parsed, chosen, WriteMode(write_mode))
    problems = incompatibilities(planned)
    if problems:
        raise InvalidArgument(f"spec: {'; '.join(problems)} ({FROM_CATALOG})")


def _stream(recorded: dict[str, Any]) -> Stream:
    columns = []
    for column in recorded["columns"]:
        try:
            columns.append(Column.from_dict(column))
        except (KeyError, TypeError, ValueError, TypeNameError):
            # A column recorded by an older engine: read as text, as a run would.
            columns.append(Column(str(column.get("name", "")), "text"))
    return Stream(
        name=recorded["name"],
        columns=tuple(columns),
        namespace=recorded["namespace"],
        primary_key=tuple(recorded["primary_key"]),
        row_estimate=int(recorded["row_estimate"]),
    )
