"""The task contract's codec (setu_tasks/codec/): each message it converts
comes back as it was sent, through both directions of the one module for its
edge, and every task result kind has its two entries there."""

import uuid
from datetime import UTC, datetime

import pytest

from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import cloud_pb2
from setu_engine.kinds import WriteMode
from setu_engine.staged.blob import BlobSettings
from setu_engine.staged.staging import Part, StoredPart
from setu_server.models import Task, TaskKind, TaskState
from setu_server.rpc.agents import task_message
from setu_tasks.codec.agents import (
    RESULT_READERS,
    RESULT_WRITERS,
    extract_spec_message,
    extract_spec_of,
    leased_task,
    load_spec_message,
    load_spec_of,
)
from setu_tasks.codec.cloud import migrate_spec_message, migrate_spec_of
from setu_tasks.results import RESULT_TYPES
from setu_tasks.specs import ConnectionSpec, ExtractSpec, LoadSpec, MigrateSpec

SOURCE = ConnectionSpec("c-1", "postgres", {"host": "db", "port": 5432, "password": "$secret:pw"})
DESTINATION = ConnectionSpec("c-2", "sqlite", {"path": "/data/out.db"})
BLOB = BlobSettings("s3", "bucket", "http://minio:9000", "eu-west-1")
SPEC = {"streams": {"public.items": {"cursor": "id"}}, "batch_rows": 5000}
STORED = [
    StoredPart(0, "public.items", 0, Part("public.items/part-00000.bin", 10, 99, "a" * 64), "p1"),
    StoredPart(1, "public.other", 3, Part("public.other/part-00003.bin", 0, 7, "b" * 64), ""),
]


def test_every_result_kind_has_a_writer_and_a_reader_named_by_its_oneof_field() -> None:
    oneof = {f.name for f in pb.CompleteTaskRequest.DESCRIPTOR.oneofs_by_name["result"].fields}
    assert set(RESULT_WRITERS) == set(RESULT_READERS) == set(RESULT_TYPES) == oneof


@pytest.mark.parametrize("free_retries", [0, 2])
def test_a_leased_task_arrives_with_its_outage_streak(free_retries: int) -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    row = Task(
        id=uuid.uuid4(),
        job_id=uuid.uuid4(),
        workspace_id=uuid.uuid4(),
        kind=TaskKind.EXTRACT,
        state=TaskState.LEASED,
        runtime="cloud",
        attempt=2,
        max_attempts=3,
        run_after=now,
        created_at=now,
        updated_at=now,
        lease_token=uuid.uuid4(),
        lease_expires_at=now,
        payload={"pipeline_id": "pl"},
        free_retries=free_retries,
    )
    wire = pb.Task.FromString(task_message(row).SerializeToString())
    leased = leased_task(wire)
    assert (leased.id, leased.kind, leased.attempt) == (str(row.id), "extract", 2)
    assert leased.payload == {"pipeline_id": "pl"}
    assert leased.free_retries == free_retries


@pytest.mark.parametrize(
    "spec",
    [
        ExtractSpec("job", "pl", SOURCE, ["public.items"], "ws/1/run/2/", BLOB),
        ExtractSpec(
            "job",
            "pl",
            SOURCE,
            ["public.items", "public.other"],
            "ws/1/run/2/",
            BLOB,
            SPEC,
            WriteMode.MERGE,
            {"public.items": "41"},
            STORED,
        ),
    ],
)
def test_an_extract_spec_arrives_as_the_server_sent_it(spec: ExtractSpec) -> None:
    sent = extract_spec_message(spec).SerializeToString()
    assert extract_spec_of(pb.ExtractSpec.FromString(sent)) == spec


def test_a_load_spec_arrives_as_the_server_sent_it() -> None:
    spec = LoadSpec(
        "job", "pl", DESTINATION, WriteMode.OVERWRITE, SPEC, "ws/1/run/2/", BLOB, "m.json", ["a"]
    )
    sent = load_spec_message(spec).SerializeToString()
    assert load_spec_of(pb.LoadSpec.FromString(sent)) == spec


@pytest.mark.parametrize("phase", [None, "extract", "load", "direct"])
def test_a_migrate_spec_arrives_as_the_server_sent_it(phase: str | None) -> None:
    spec = MigrateSpec(
        "job",
        "ws",
        "pl",
        SOURCE,
        DESTINATION,
        ["public.items"],
        SPEC,
        WriteMode.MERGE,
        phase,
        dry_run=phase is None,
        load_on_agent=phase == "load",
        rows_extracted=12,
        blob_prefix="ws/1/run/2/",
        blob=BLOB,
        cancel_requested=phase == "direct",
        ended=phase == "extract",
        cursors={"public.items": "41"},
        stored_parts=STORED,
    )
    sent = migrate_spec_message(spec).SerializeToString()
    assert migrate_spec_of(cloud_pb2.MigrateSpec.FromString(sent)) == spec
