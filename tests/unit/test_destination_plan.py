"""The one assessment a dry run reports and a load acts on
(setu_engine/planning/destination_plan.py), and the plan's typed shape on both wires."""

from __future__ import annotations

from setu_client import Job, JobKind, JobState
from setu_engine.kinds import WriteMode
from setu_engine.operators.chain import SchemaEvolution
from setu_engine.planning.destination_plan import (
    Assessment,
    DestinationColumn,
    Landing,
    TableShape,
    assess,
)
from setu_engine.planning.plans import PlannedColumn, PlannedStream
from setu_engine.values.types import Column
from setu_tasks.codec.agents import RESULT_READERS, completion
from setu_tasks.results import (
    LoadResult,
    MigrateMode,
    MigrateResult,
    result_from_json,
)
from setu_tasks.specs import LeasedTask

LANDING = Landing(
    "public.orders",
    "orders",
    None,
    (Column("id", "bigint", False), Column("amount", "integer"), Column("note", "text")),
    ("id",),
)
TARGET = '"public"."orders"'


def existing(*columns: DestinationColumn, keys: tuple[frozenset[str], ...] = ()) -> TableShape:
    return TableShape(TARGET, columns=columns, unique_keys=keys)


def col(
    name: str, neutral: str | None, type_: str = "", required: bool = False
) -> DestinationColumn:
    return DestinationColumn(name, type_ or str(neutral), neutral, required)


def test_no_table_is_created_and_a_missing_schema_first() -> None:
    assert assess(LANDING, TableShape(TARGET), WriteMode.APPEND, SchemaEvolution.FAIL) == (
        Assessment((f"create table {TARGET}",))
    )
    in_edge = Landing("s", "orders", "edge", LANDING.columns, LANDING.key)
    shape = TableShape('"edge"."orders"', missing_schema="edge")
    assert assess(in_edge, shape, WriteMode.APPEND, SchemaEvolution.ADD_COLUMNS).actions == (
        "create schema edge",
        'create table "edge"."orders"',
    )


def test_missing_columns_are_added_nullable_or_refused() -> None:
    shape = existing(col("id", "bigint"), col("amount", "integer"))
    added = assess(LANDING, shape, WriteMode.APPEND, SchemaEvolution.ADD_COLUMNS)
    assert added.added == (Column("note", "text", True),)
    assert added.actions == ("add column(s) note (text)", f"append to the existing table {TARGET}")
    assert added.incompatibilities == ()
    refused = assess(LANDING, shape, WriteMode.APPEND, SchemaEvolution.FAIL)
    assert refused.added == ()
    (problem,) = refused.incompatibilities
    assert "has no column(s) note (text)" in problem and "schema_evolution is fail" in problem


def test_a_type_change_is_refused_and_a_widening_is_not() -> None:
    widened = existing(col("id", "numeric"), col("amount", "bigint"), col("note", "text"))
    assert assess(LANDING, widened, WriteMode.APPEND, SchemaEvolution.FAIL).incompatibilities == ()
    # Text takes anything; a type Setu has no name for is not judged.
    loose = existing(col("id", "text"), col("amount", None, "inet"), col("note", "text"))
    assert assess(LANDING, loose, WriteMode.APPEND, SchemaEvolution.FAIL).incompatibilities == ()
    narrowed = existing(col("id", "integer"), col("amount", "integer"), col("note", "json"))
    problems = assess(LANDING, narrowed, WriteMode.APPEND, SchemaEvolution.FAIL).incompatibilities
    assert [p.split(":")[0] for p in problems] == [
        "stream public.orders, column id",
        "stream public.orders, column note",
    ]
    assert "(integer → bigint)" in problems[0] and "(json → text)" in problems[1]


def test_a_required_column_unsent_and_a_key_without_an_index() -> None:
    shape = existing(
        col("id", "bigint"),
        col("amount", "integer"),
        col("note", "text"),
        col("region", "text", required=True),
    )
    problems = assess(LANDING, shape, WriteMode.UPSERT, SchemaEvolution.FAIL).incompatibilities
    assert len(problems) == 2
    assert "destination column region" in problems[0]
    assert "needs a primary key or unique index on (id)" in problems[1]
    keyed = existing(*shape.columns[:3], keys=(frozenset({"id"}),))
    assert assess(LANDING, keyed, WriteMode.UPSERT, SchemaEvolution.FAIL).actions == (
        f"upsert into the existing table {TARGET}",
    )


PLANNED = PlannedStream(
    "public.orders",
    "edge.orders",
    12,
    (Column("id", "bigint", False),),
    ("id",),
    "edge",
    "orders",
    ("create schema edge",),
    ("a problem",),
    (PlannedColumn("id", "bigint", "id", ""),),
)


def test_a_plan_survives_json_and_grpc_whole() -> None:
    migrated = MigrateResult(MigrateMode.DRY_RUN, planned=(PLANNED,))
    assert result_from_json(migrated.to_json()) == migrated
    assert migrated.to_json()["incompatibilities"] == ["a problem"]
    loaded = LoadResult(0, dry_run=True, planned=(PLANNED,), notes=(("s", "Added column(s) x"),))
    assert result_from_json(loaded.to_json()) == loaded
    task = LeasedTask("t", "j", "load", 1, 3, "l")
    for result in (migrated, loaded):
        request = completion(task, result)
        kind = request.WhichOneof("result")
        assert RESULT_READERS[kind](getattr(request, kind)) == result


def test_a_plan_recorded_before_inspection_still_reads() -> None:
    old = {
        "kind": "migrate",
        "dry_run": True,
        "streams": [
            {
                "stream": "orders",
                "destination": "orders",
                "rows_estimate": 1,
                "columns": [],
                "key": [],
            }
        ],
    }
    (planned,) = MigrateResult.from_json(old).planned
    assert planned.actions == () and planned.mapping == ()


def test_the_sdk_reads_the_plan_of_a_dry_run_only() -> None:
    result = MigrateResult(MigrateMode.DRY_RUN, planned=(PLANNED,)).to_json()
    job = Job("j", "w", JobKind.RUN, JobState.FAILED, 1, dry_run=True, result=result)
    assert job.plan is not None
    (stream,) = job.plan.streams
    assert (stream.stream, stream.actions, stream.columns[0].source) == (
        "public.orders",
        ("create schema edge",),
        "id",
    )
    assert job.plan.incompatibilities == ("a problem",)
    assert Job("j", "w", JobKind.RUN, JobState.SUCCEEDED, 1, result={"rows": 1}).plan is None
