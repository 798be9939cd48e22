from __future__ import annotations

import grpc
import pytest

from setu_client.errors import (
    ERRORS,
    REASON_KEY,
    JobNotFound,
    JobNotStarted,
    NotFound,
    SetuError,
    from_status,
    status_of,
)


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_every_error_survives_the_wire(cls: type[SetuError]) -> None:
    code, details, trailers = status_of(cls("what happened"))
    back = from_status(code, details, dict(trailers))
    assert type(back) is cls
    assert back.message == "what happened"


def test_reason_distinguishes_errors_that_share_a_code() -> None:
    assert JobNotFound.code == NotFound.code
    assert type(from_status(grpc.StatusCode.NOT_FOUND, "x", {})) is NotFound
    assert type(from_status(grpc.StatusCode.NOT_FOUND, "x", {REASON_KEY: "job_not_found"})) is (
        JobNotFound
    )
    assert isinstance(
        from_status(grpc.StatusCode.FAILED_PRECONDITION, "", {REASON_KEY: "job_not_started"}),
        JobNotStarted,
    )


def test_unknown_code_maps_to_the_base_class() -> None:
    assert type(from_status(grpc.StatusCode.DATA_LOSS, "x")) is SetuError


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_every_error_carries_its_status_and_the_servers_message(cls: type[SetuError]) -> None:
    code, details, trailers = status_of(cls("why"))
    back = from_status(code, details, dict(trailers))
    assert (back.status, back.message, back.reason) == (cls.code, "why", cls.reason)


def test_job_errors_name_the_job() -> None:
    assert JobNotFound("gone", job_id="j-1").job_id == "j-1"
    assert JobNotStarted("ready", job_id="j-2").job_id == "j-2"
    # From the wire alone the id is unknown; the SDK fills it in for its calls.
    error = from_status(grpc.StatusCode.NOT_FOUND, "x", {REASON_KEY: "job_not_found"})
    assert isinstance(error, JobNotFound) and error.job_id == ""
