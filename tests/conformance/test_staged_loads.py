"""Resumable per-part loads (capabilities.staged_loads, StagingDestination
in setu_engine/staged/resumable.py): parts staged with their markers, a
retry skips a part already staged, readers see nothing until the one apply,
which records the stream's marker and drops the staging table; an apply
rolled back at its last word changes nothing; another run's stale stage is
dropped with its part markers. A provider without staged loads declares it
and implements none of it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta

import pytest

from setu_engine.kinds import CopyBatch, RowChanges, WriteMode, changes_of
from setu_engine.operators.chain import parse_spec
from setu_engine.providers.base import Connector
from setu_engine.staged import pgcopy
from setu_engine.staged.markers import LoadIdentity
from setu_engine.staged.resumable import (
    STAGE_PREFIX,
    StagingDestination,
    Target,
    part_marker,
    stage_marker,
    stage_table,
)
from setu_engine.values.types import Batch, Column
from tests.conformance.harness import Place
from tests.conformance.support import PEOPLE, read_back, write

STREAM = "people"
BEFORE = [(1, "a"), (2, "b")]
PARTS = [[(2, "B"), (3, "c")], [(4, "d")]]
AFTER = [(1, "a"), (2, "B"), (3, "c"), (4, "d")]


class Stop(Exception):
    """A cancel's last word before the apply commits."""


def piece(
    destination: StagingDestination, rows: Batch, columns: Sequence[Column]
) -> CopyBatch | Batch:
    return CopyBatch(pgcopy.encode(columns, rows), len(rows)) if destination.copies else rows


async def nothing() -> None:
    return None


async def stop() -> None:
    raise Stop


def stages(objects: set[str]) -> set[str]:
    return {o for o in objects if STAGE_PREFIX in o}


async def staging(place: Place) -> tuple[Connector, StagingDestination]:
    connector = await place.connect()
    if not place.capabilities.staged_loads:
        await connector.close()
        assert not isinstance(connector, StagingDestination)
        pytest.skip("the provider declares no staged loads (and has none)")
    assert isinstance(connector, StagingDestination)
    return connector, connector


async def test_a_staged_load_resumes_at_its_first_unstaged_part(place: Place) -> None:
    await write(place, STREAM, PEOPLE, BEFORE, WriteMode.OVERWRITE)
    connector, dest = await staging(place)
    run = LoadIdentity(str(uuid.uuid4()))
    stage = stage_table(run.run_id, STREAM)
    plan = parse_spec(None).chain_for(STREAM).plan(PEOPLE)
    target = Target(STREAM, None, plan, WriteMode.UPSERT, ("id",))
    try:
        await dest.prepare_stage(stage, PEOPLE, None, stage_marker(run.run_id, STREAM))
        first, second = (piece(dest, rows, PEOPLE) for rows in PARTS)
        assert await dest.stage_part(stage, PEOPLE, first, part_marker(run, STREAM, 0), None)
        # The attempt died after its commit: its retry finds part 0 staged.
        assert await dest.marked(part_marker(run, STREAM, 0)) == 2
        assert await dest.marked(part_marker(run, STREAM, 1)) is None
        again = await dest.stage_part(stage, PEOPLE, first, part_marker(run, STREAM, 0), None)
        assert again is False, "a staged part is never copied twice"
        assert await dest.stage_part(stage, PEOPLE, second, part_marker(run, STREAM, 1), None)
        assert await read_back(place, STREAM) == BEFORE, "readers see nothing before the apply"
        # Cancelled at the apply's last word: rolled back, the stage kept.
        with pytest.raises(Stop):
            await dest.apply_stage(stage, PEOPLE, target, run.marker(STREAM), stop)
        assert await read_back(place, STREAM) == BEFORE
        assert await dest.marked(run.marker(STREAM)) is None
        written = await dest.apply_stage(stage, PEOPLE, target, run.marker(STREAM), nothing)
        assert int(written) == 3
        if "upsert" in place.capabilities.reports_changes:
            assert changes_of(written) == RowChanges(inserted=2, updated=1)
        assert await dest.marked(run.marker(STREAM)) == 3
    finally:
        await connector.close()
    assert await read_back(place, STREAM) == AFTER
    assert not stages(await place.objects()), "the apply drops its staging table"


async def test_another_runs_stale_stage_is_dropped_with_its_markers(place: Place) -> None:
    connector, dest = await staging(place)
    gone, current = LoadIdentity(str(uuid.uuid4())), LoadIdentity(str(uuid.uuid4()))
    stage = stage_table(gone.run_id, STREAM)
    try:
        await dest.prepare_stage(stage, PEOPLE, None, stage_marker(gone.run_id, STREAM))
        part = piece(dest, PARTS[0], PEOPLE)
        assert await dest.stage_part(stage, PEOPLE, part, part_marker(gone, STREAM, 0), None)
    finally:
        await connector.close()  # its process died
    assert stages(await place.objects())
    connector, dest = await staging(place)
    try:
        assert await dest.stale_stages(current.run_id, timedelta(hours=1)) == []
        (stale,) = await dest.stale_stages(current.run_id, timedelta(0))
        assert (stale.run_id, stale.stream) == (gone.run_id, STREAM)
        assert await dest.stale_stages(gone.run_id, timedelta(0)) == [], "not its own run's"
        await dest.drop_stage(stage, stale)
        assert await dest.marked(part_marker(gone, STREAM, 0)) is None
        assert await dest.stale_stages(current.run_id, timedelta(0)) == []
    finally:
        await connector.close()
    assert not stages(await place.objects()), "dropped with its markers"
