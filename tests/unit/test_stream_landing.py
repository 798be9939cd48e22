"""Where a stream lands (setu_engine/movement/transfer.py `plan_stream`): its own
name as one identifier, whatever it holds; another schema only where the
pipeline's spec.destination names one."""

from __future__ import annotations

import pytest

from setu_engine.kinds import WriteMode
from setu_engine.movement.transfer import plan_stream
from setu_engine.operators.chain import parse_spec
from setu_engine.values.types import Column, Stream

COLUMNS = (Column("id", "bigint", False),)


@pytest.mark.parametrize("name", ["victim", "public.victim", 'a"."b', "../escape", "x.y.z"])
def test_a_source_name_is_one_table_in_the_configured_schema(name: str) -> None:
    landing = plan_stream(
        parse_spec(None), Stream(name, COLUMNS, namespace="public"), WriteMode.APPEND
    )
    assert (landing.schema, landing.table, landing.destination) == (None, name, name)


@pytest.mark.parametrize(
    ("mapped", "schema", "table"),
    [
        ("archive.kept", "archive", "kept"),
        ("archive.a.b", "archive", "a.b"),  # the schema ends at the first dot
        ("flat", None, "flat"),
        (".hidden", None, ".hidden"),  # no schema before the dot: one name
        ("trailing.", None, "trailing."),
    ],
)
def test_the_pipelines_mapping_may_name_a_schema(
    mapped: str, schema: str | None, table: str
) -> None:
    spec = parse_spec({"destination": {"public.victim": mapped}})
    landing = plan_stream(spec, Stream("victim", COLUMNS, namespace="public"), WriteMode.APPEND)
    assert (landing.schema, landing.table, landing.destination) == (schema, table, mapped)
