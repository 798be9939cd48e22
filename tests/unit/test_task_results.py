"""Typed task results across their edges: JSON (what the database keeps) and
the CompleteTaskRequest oneof (what an agent sends). A field that is
misspelt, unknown or missing fails loudly; nothing is dropped."""

from __future__ import annotations

from dataclasses import replace

import pytest

from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_engine.kinds import RowChanges
from setu_engine.planning.plans import PlannedStream
from setu_engine.values.types import Column, Stream
from setu_tasks.codec.agents import completion, task_result
from setu_tasks.results import (
    NOTES_PER_STREAM,
    Artifact,
    ArtifactStream,
    DiscoverResult,
    ExtractResult,
    LoadResult,
    MalformedResult,
    MigrateMode,
    MigrateResult,
    PreviewResult,
    StreamCounts,
    TaskResult,
    TestResult,
    check_result,
    result_from_json,
)
from setu_tasks.specs import LeasedTask

ID = Column("id", "bigint", nullable=False)
ITEMS = Stream("items", (ID, Column("name", "text")), "public", ("id",), 8000)
EXTRACT = ExtractResult(
    Artifact("ws/1/pl/2/run/3/", (ArtifactStream("public.items", 8000, ("p0", "p1"), "abc"),)),
    8000,
)
WIRE_RESULTS: list[TaskResult] = [
    EXTRACT,
    replace(EXTRACT, notes=(("public.items", "stream public.items: incremental from id > 7"),)),
    LoadResult(8000, {"public.items": 8000, "public.empty": 0}),
    LoadResult(8000, {"public.items": 8000, "f": 0}, {"public.items": RowChanges(1, 2, 7997)}),
    TestResult(ok=False, message="refused"),
    DiscoverResult((ITEMS,)),
    DiscoverResult((Stream("t", (Column("c", "text", True, "character varying(20)"),)),)),
    PreviewResult((ID,), ({"id": 1}, {"id": 2})),
]
CLOUD_RESULTS: list[TaskResult] = [
    MigrateResult(MigrateMode.SKIPPED, reason="the run had already ended"),
    MigrateResult(MigrateMode.HANDOFF, rows_extracted=12),
    MigrateResult(MigrateMode.STAGED, 12, 10, (StreamCounts("a", 12, 10), StreamCounts("b", 0, 0))),
    MigrateResult(
        MigrateMode.DRY_RUN,
        planned=(PlannedStream("items", "public.items", 8000, (ID,), ("id",)),),
    ),
]


def leased(kind: str) -> LeasedTask:
    return LeasedTask("task", "job", kind, 1, 3, "token")


@pytest.mark.parametrize("result", WIRE_RESULTS + CLOUD_RESULTS, ids=lambda r: r.kind)
def test_every_result_comes_back_from_its_json_as_it_was(result: TaskResult) -> None:
    assert result_from_json(result.to_json()) == result


@pytest.mark.parametrize("result", WIRE_RESULTS + CLOUD_RESULTS, ids=lambda r: r.kind)
def test_every_result_a_runtime_sends_arrives_as_it_was_sent(result: TaskResult) -> None:
    request = completion(leased(result.kind), result)
    assert request.WhichOneof("result") == result.kind
    arrived = pb.CompleteTaskRequest.FromString(request.SerializeToString())
    assert task_result(arrived) == result


def test_counts_keep_their_type_in_json() -> None:
    record = LoadResult(8000, {"items": 8000}).to_json()
    assert record == {"kind": "load", "rows_loaded": 8000, "rows_by_stream": {"items": 8000}}
    assert type(record["rows_loaded"]) is int


@pytest.mark.parametrize(
    ("record", "complaint"),
    [
        (
            {"kind": "load", "rows_loded": 8000, "rows_by_stream": {}},
            "load result: unknown field(s) rows_loded; missing field(s) rows_loaded",
        ),
        ({"kind": "test", "ok": True}, "test result: missing field(s) message"),
        (
            {"kind": "test", "ok": True, "message": "", "detail": "x"},
            "test result: unknown field(s) detail",
        ),
        (
            {"kind": "load", "rows_loaded": "8000", "rows_by_stream": {}},
            "load result.rows_loaded: expected int, got str",
        ),
        (
            {"kind": "load", "rows_loaded": 1, "rows_by_stream": {"items": 1.0}},
            "rows_by_stream['items']: expected int, got float",
        ),
        (
            {"kind": "load", "rows_loaded": -1, "rows_by_stream": {}},
            "load result: rows_loaded is negative",
        ),
        ({"kind": "lode", "rows_loaded": 1}, "no task kind 'lode'"),
        ({"rows_loaded": 1}, "a task result names its kind"),
    ],
)
def test_a_misspelt_or_missing_field_in_a_json_result_fails_loudly(
    record: dict[str, object], complaint: str
) -> None:
    with pytest.raises(MalformedResult) as info:
        result_from_json(record)
    assert complaint in str(info.value)


def test_a_misspelt_field_deep_in_a_json_result_fails_loudly() -> None:
    record = EXTRACT.to_json()
    record["artifact"]["streams"][0]["checksun"] = record["artifact"]["streams"][0].pop("checksum")
    with pytest.raises(MalformedResult) as info:
        result_from_json(record)
    assert "artifact stream: unknown field(s) checksun; missing field(s) checksum" in str(
        info.value
    )


def test_a_handler_that_returns_a_dict_is_refused_not_guessed_at() -> None:
    with pytest.raises(MalformedResult) as info:
        check_result("test", {"ok": True, "mesage": "typo"})
    assert "a test task must end with a TestResult, not dict" in str(info.value)
    with pytest.raises(MalformedResult):
        check_result("load", TestResult(ok=True, message=""))
    assert check_result("test", TestResult(ok=True, message="")) == TestResult(True, "")


def test_a_result_field_this_server_does_not_know_is_refused_not_dropped() -> None:
    request = completion(leased("load"), LoadResult(5, {"items": 5}))
    # Field 9 of LoadResult, as a newer agent might send it: varint 7.
    request.load.MergeFromString(b"\x48\x07")
    arrived = pb.CompleteTaskRequest.FromString(request.SerializeToString())
    with pytest.raises(MalformedResult) as info:
        task_result(arrived)
    assert "the load result carries fields this server does not know: load result.#9" in str(
        info.value
    )


def test_an_unknown_field_nested_in_a_result_is_refused_too() -> None:
    request = completion(leased("extract"), EXTRACT)
    request.extract.artifact.streams[0].MergeFromString(b"\x48\x07")
    with pytest.raises(MalformedResult) as info:
        task_result(request)
    assert "extract result.artifact.streams[0].#9" in str(info.value)


def test_an_extract_note_on_a_stream_it_did_not_stage_is_refused() -> None:
    stray = replace(EXTRACT, notes=(("public.other", "stream public.other: …"),))
    with pytest.raises(MalformedResult, match=r"a note on 'public\.other', which it did not stage"):
        stray.validate()
    flood = replace(EXTRACT, notes=(("public.items", "…"),) * (NOTES_PER_STREAM + 1))
    with pytest.raises(MalformedResult, match=r"a note on 'public\.items', which it did not"):
        flood.validate()
    replace(EXTRACT, notes=(("public.items", "stream public.items: …"),)).validate()
    replace(EXTRACT, notes=(("public.items", "…"),) * NOTES_PER_STREAM).validate()


def test_an_extract_without_its_artifact_is_refused() -> None:
    bare = task_result(pb.CompleteTaskRequest(extract=pb.ExtractResult(rows_extracted=5)))
    assert isinstance(bare, ExtractResult)
    with pytest.raises(MalformedResult) as info:
        bare.validate()
    assert "extract result: artifact.blob_prefix is missing" in str(info.value)


def test_a_migrate_result_of_no_known_mode_is_refused() -> None:
    request = completion(leased("migrate"), MigrateResult(MigrateMode.DIRECT))
    request.migrate.mode = "sideways"
    with pytest.raises(MalformedResult, match="migrate result: no mode 'sideways'"):
        task_result(request)
