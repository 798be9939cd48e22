from __future__ import annotations

import pytest

from setu_client._proto.setu.v1 import admin_pb2, agents_pb2, jobs_pb2
from setu_client.errors import InvalidArgument
from setu_server.rpc.validation import validate

GOOD_ID = "0b4f5e2c-1b7e-4f0e-9a55-3c2d1e0f9a11"


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (jobs_pb2.GetJobRequest(), "job_id: required"),
        (jobs_pb2.GetJobRequest(job_id="  "), "job_id: required"),
        (jobs_pb2.GetJobRequest(job_id="nope"), "job_id: must be a UUID"),
        (jobs_pb2.GetJobRequest(job_id="{" + GOOD_ID + "}"), "job_id: must be a UUID"),
        (jobs_pb2.ListJobsRequest(page_size=501), "page_size: must be at most 500"),
        (jobs_pb2.ListJobsRequest(page_size=-1), "page_size: must be at least 0"),
        (jobs_pb2.ListJobsRequest(pipeline_id="x"), "pipeline_id: must be a UUID"),
        (jobs_pb2.SubmitRunRequest(pipeline_id=GOOD_ID, idempotency_key="k" * 201), "at most 200"),
        (admin_pb2.CreateWorkspaceRequest(), "name: required"),
        (
            agents_pb2.FailTaskRequest(task_id=GOOD_ID, lease_token=GOOD_ID),
            "error_message: required",
        ),
    ],
)
def test_rejects_with_the_field_named(message: object, error: str) -> None:
    with pytest.raises(InvalidArgument, match=error):
        validate(message)  # type: ignore[arg-type]


def test_nested_messages_are_checked_with_their_path() -> None:
    from setu_client._proto.setu.v1 import connections_pb2

    request = connections_pb2.UpdateConnectionRequest(
        connection_id=GOOD_ID, connection=connections_pb2.Connection()
    )
    validate(request)  # the Connection message itself carries no rules
    with pytest.raises(InvalidArgument, match="connection: required"):
        validate(connections_pb2.UpdateConnectionRequest(connection_id=GOOD_ID))


def test_accepts_valid_requests() -> None:
    validate(jobs_pb2.GetJobRequest(job_id=GOOD_ID))
    validate(jobs_pb2.ListJobsRequest(page_size=500))
    validate(jobs_pb2.WatchJobRequest(job_id=GOOD_ID, from_version=0))
