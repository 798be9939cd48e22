"""A table of every neutral type with its edge values (nulls, empty
strings, unicode in seven scripts and emoji, ±infinity, NaN, -0, each
type's min and max, 1 MB of text, big decimals) written through each
provider and read back, compared value by value. What a provider cannot
hold it declares (capabilities.values): a refused value fails its write
with a ValueFault naming stream, column and row, the target unchanged; a
lost one reads back as docs/data-types.md says."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from setu_engine.capabilities import EDGES as EDGE_NAMES
from setu_engine.errors import ValueFault
from setu_engine.kinds import CopyBatch, WriteMode
from setu_engine.operators.chain import parse_spec
from setu_engine.providers import get_provider
from setu_engine.providers.base import CopyDestination
from setu_engine.staged import pgcopy
from tests.conformance import edges
from tests.conformance.harness import HARNESSES, Harness, Place
from tests.conformance.support import read_back, same, same_rows, show, write

STREAM = "edge"


@pytest.mark.parametrize("harness", HARNESSES, ids=[h.id for h in HARNESSES])
def test_declared_edges_are_edges_of_their_type(harness: Harness) -> None:
    """A declaration names an edge value the suite has ("<type>:<edge>"),
    so a misspelt one cannot pass for a refusal."""
    provider = harness.provider
    if not harness.registered:
        pytest.skip(f"provider {provider} not registered yet")
    capabilities = get_provider(provider).capabilities
    declared = [capabilities.values, *(v for _, v in capabilities.values_by_format)]
    known = {edges.name(t, e) for t, cells in edges.EDGES.items() for e, _ in cells if e}
    assert {e for _, cells in edges.EDGES.items() for e, _ in cells if e} <= set(EDGE_NAMES)
    for values in declared:
        assert values.refuses | values.loses <= known
        assert not values.refuses & values.loses


async def test_every_type_round_trips_value_by_value(place: Place) -> None:
    rows, expected = edges.table(place.values)
    written = await write(place, STREAM, edges.COLUMNS, rows, WriteMode.OVERWRITE)
    assert int(written) == len(rows)
    back = await read_back(place, STREAM, batch_rows=3)
    assert [row[0] for row in back] == [row[0] for row in rows]
    wrong = [
        f"row {row[0]} {c.name}: wrote {show(expected[(row[0], c.name)])}, read {show(value)}"
        for row in back
        for c, value in zip(edges.COLUMNS[1:], row[1:], strict=True)
        if not same(expected[(row[0], c.name)], value, c.type)
    ]
    assert not wrong, "\n".join(wrong)


async def test_a_refused_value_fails_naming_stream_column_and_row(place: Place) -> None:
    refused = edges.refused(place.values)
    if not refused:
        pytest.skip("the provider refuses no edge value")
    baseline, _ = edges.table(place.values)
    await write(place, STREAM, edges.COLUMNS, baseline[:2], WriteMode.OVERWRITE)
    before = await read_back(place, STREAM)
    for type_, value in refused:
        column = f"c_{type_}"
        index = [c.name for c in edges.COLUMNS].index(column)
        bad = list(baseline[1])
        bad[0], bad[index] = 9, value
        rows = [baseline[1], tuple(bad)]
        with pytest.raises(ValueFault) as caught:
            await write(place, STREAM, edges.COLUMNS, rows, WriteMode.OVERWRITE)
        fault = caught.value
        # The connector names column and row; the stream, it or the transfer.
        assert fault.stream in (None, STREAM)
        assert (fault.column, fault.row) == (column, 2), (
            type_,
            show(value),
            str(fault),
        )
        after = await read_back(place, STREAM)
        assert same_rows(after, before), f"{type_} {show(value)} changed it"


async def test_the_copy_path_round_trips_too(place: Place) -> None:
    """A `copy_in` destination takes staged binary COPY parts (the staged
    path of a run) to the same values."""
    if not place.capabilities.copy_in:
        pytest.skip("the provider takes no COPY parts (capabilities.copy_in)")
    rows, expected = edges.table(place.values)
    connector = await place.connect()
    assert isinstance(connector, CopyDestination)
    plan = parse_spec(None).chain_for(STREAM).plan(edges.COLUMNS)

    async def parts() -> AsyncIterator[CopyBatch]:
        for start in range(0, len(rows), 3):
            chunk = rows[start : start + 3]
            yield CopyBatch(pgcopy.encode(edges.COLUMNS, chunk), len(chunk))

    try:
        written = await connector.write_copy(
            STREAM, edges.COLUMNS, parts(), plan, WriteMode.OVERWRITE, ["id"]
        )
    finally:
        await connector.close()
    assert int(written) == len(rows)
    back = await read_back(place, STREAM)
    wrong = [
        f"row {row[0]} {c.name}: wrote {show(expected[(row[0], c.name)])}, read {show(value)}"
        for row in back
        for c, value in zip(edges.COLUMNS[1:], row[1:], strict=True)
        if not same(expected[(row[0], c.name)], value, c.type)
    ]
    assert len(back) == len(rows) and not wrong, "\n".join(wrong)
