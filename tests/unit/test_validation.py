from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from pathlib import Path

import pytest
from google.protobuf import field_mask_pb2, struct_pb2
from google.protobuf.message import Message

from setu_client._proto.setu.v1 import (
    admin_pb2,
    agents_pb2,
    connections_pb2,
    jobs_pb2,
    pipelines_pb2,
)
from setu_client.errors import InvalidArgument
from setu_engine.errors import ExprError
from setu_engine.filters.expr import MAX_FILTER_DEPTH, MAX_IN_ITEMS, MAX_NUMBER_LENGTH, parse
from setu_engine.filters.expr_compile import column_refs, compile_filter
from setu_engine.operators.chain import cast_literal
from setu_server.rpc.validation import (
    LIMITS,
    MAX_REPEATED_ITEMS,
    MAX_STRUCT_DEPTH,
    MAX_STRUCT_VALUES,
    MAX_TIMESTAMP_SECONDS,
    MIN_TIMESTAMP_SECONDS,
    validate,
)
from setu_server.service import paging

_PROCESS_KEY = paging._key

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


# -- the limits every request obeys ----------------------------------------------


def _nested_struct(depth: int) -> struct_pb2.Struct:
    top = struct_pb2.Struct()
    inner = top
    for _ in range(depth - 1):
        inner = inner.fields["a"].struct_value
    inner.fields["leaf"].number_value = 1
    return top


def _connection(**config: object) -> connections_pb2.CreateConnectionRequest:
    request = connections_pb2.CreateConnectionRequest(name="c", provider="sqlite")
    request.config.update(config)
    return request


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (admin_pb2.CreateWorkspaceRequest(name="a\x00b"), r"^name: must not contain a NUL"),
        (jobs_pb2.CancelJobRequest(job_id=GOOD_ID, reason="\x00"), r"^reason: must not contain"),
        (
            pipelines_pb2.CreatePipelineRequest(
                name="p",
                source_connection_id=GOOD_ID,
                destination_connection_id=GOOD_ID,
                streams=["ok", "b\x00d"],
            ),
            r"^streams\[1\]: must not contain a NUL",
        ),
        (
            connections_pb2.UpdateConnectionRequest(
                connection_id=GOOD_ID,
                connection=connections_pb2.Connection(name="x\x00"),
            ),
            r"^connection\.name: must not contain a NUL",
        ),
        (
            connections_pb2.UpdateConnectionRequest(
                connection_id=GOOD_ID,
                connection=connections_pb2.Connection(name="x"),
                update_mask=field_mask_pb2.FieldMask(paths=["name\x00"]),
            ),
            r"^update_mask\.paths\[0\]: must not contain a NUL",
        ),
        (_connection(path="/tmp/\x00x"), r"^config\.path: must not contain a NUL"),
        (_connection(**{"k\x00": 1}), r"^config key 'k\\x00': must not contain a NUL"),
        (_connection(deep={"list": [1, "x\x00"]}), r"^config\.deep\.list\[1\]: must not contain"),
        (_connection(port=math.nan), r"^config\.port: must be a finite number, got nan"),
        (_connection(port=math.inf), r"^config\.port: must be a finite number, got inf"),
        (_connection(x={"y": [-math.inf]}), r"^config\.x\.y\[0\]: must be a finite number"),
        (
            _connection(**{"odd key": math.nan}),
            r"^config\['odd key'\]: must be a finite number",
        ),
    ],
)
def test_limits_reject_with_the_field_named(message: Message, error: str) -> None:
    with pytest.raises(InvalidArgument, match=error):
        validate(message)


def test_map_keys_and_repeated_structs_are_checked() -> None:
    with pytest.raises(InvalidArgument, match=r"^rows_by_stream key: must not contain a NUL"):
        validate(agents_pb2.LoadResult(rows_by_stream={"ok": 1, "a\x00": 2}))
    preview = agents_pb2.PreviewResult()
    preview.rows.add().update({"x": 1})
    preview.rows.add().update({"x": math.nan})
    with pytest.raises(InvalidArgument, match=r"^rows\[1\]\.x: must be a finite number"):
        validate(preview)


def test_struct_depth_is_limited() -> None:
    validate(_connection_with(_nested_struct(MAX_STRUCT_DEPTH)))
    with pytest.raises(InvalidArgument, match=f"^config: nested deeper than {MAX_STRUCT_DEPTH}"):
        validate(_connection_with(_nested_struct(MAX_STRUCT_DEPTH + 1)))
    deep_list = struct_pb2.Struct()
    value = deep_list.fields["a"]
    for _ in range(MAX_STRUCT_DEPTH):
        value = value.list_value.values.add()
    value.number_value = 1
    with pytest.raises(InvalidArgument, match=r"^config: nested deeper"):
        validate(_connection_with(deep_list))


def test_struct_size_is_limited() -> None:
    validate(_connection(values=list(range(MAX_STRUCT_VALUES - 2))))
    with pytest.raises(InvalidArgument, match=f"^config: at most {MAX_STRUCT_VALUES} values"):
        validate(_connection(values=list(range(MAX_STRUCT_VALUES))))


def test_repeated_fields_are_limited() -> None:
    def request(n: int) -> pipelines_pb2.CreatePipelineRequest:
        return pipelines_pb2.CreatePipelineRequest(
            name="p",
            source_connection_id=GOOD_ID,
            destination_connection_id=GOOD_ID,
            streams=[f"s{i}" for i in range(n)],
        )

    validate(request(MAX_REPEATED_ITEMS))
    with pytest.raises(InvalidArgument, match=f"^streams: at most {MAX_REPEATED_ITEMS} items"):
        validate(request(MAX_REPEATED_ITEMS + 1))


@pytest.mark.parametrize(
    ("seconds", "nanos", "error"),
    [
        (MAX_TIMESTAMP_SECONDS + 1, 0, "created_after: must be within years 1 to 9999"),
        (MIN_TIMESTAMP_SECONDS - 1, 0, "created_after: must be within years 1 to 9999"),
        (2**62, 0, "created_after: must be within years 1 to 9999"),
        (0, -1, "created_after: nanos must be within"),
        (0, 10**9, "created_after: nanos must be within"),
    ],
)
def test_timestamps_out_of_range(seconds: int, nanos: int, error: str) -> None:
    request = jobs_pb2.ListJobsRequest()
    request.created_after.seconds = seconds
    request.created_after.nanos = nanos
    with pytest.raises(InvalidArgument, match=error):
        validate(request)


def test_timestamps_at_the_edges_are_accepted() -> None:
    request = jobs_pb2.ListJobsRequest()
    request.created_after.seconds = MIN_TIMESTAMP_SECONDS
    request.created_before.seconds = MAX_TIMESTAMP_SECONDS
    request.created_before.nanos = 999_999_999
    validate(request)
    request.created_after.ToDatetime()  # and both convert
    request.created_before.ToDatetime()


def _connection_with(config: struct_pb2.Struct) -> connections_pb2.CreateConnectionRequest:
    request = connections_pb2.CreateConnectionRequest(name="c", provider="sqlite")
    request.config.CopyFrom(config)
    return request


def test_the_limits_are_documented() -> None:
    """docs/errors.md's limits table says every limit, with its value."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
    rows = dict(re.findall(r"^\| ([^|]+?) \| `?([\d,]+)`? \|", doc, re.MULTILINE))
    documented = {name: int(value.replace(",", "")) for name, value in rows.items()}
    assert documented == dict(LIMITS)


# -- filter limits (the engine's parser; pipelines' specs reach it) ----------------


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("(" * (MAX_FILTER_DEPTH + 1) + "a" + ")" * (MAX_FILTER_DEPTH + 1), "nested deeper"),
        ("(" * 100_000, "nested deeper"),
        ("not " * 10_000 + "a", "nested deeper"),
        ("- " * 10_000 + "a = 1", "nested deeper"),
        ("a" + " + a" * 10_000 + " = 1", "nested deeper"),
        (" or ".join(["a = 1"] * 10_000), "nested deeper"),
        ("a in (" + ",".join(["1"] * (MAX_IN_ITEMS + 1)) + ")", "more than 256 values"),
        ("a = " + "1" * 5000, f"number longer than {MAX_NUMBER_LENGTH} characters at 5"),
    ],
)
def test_filters_beyond_the_limits_are_syntax_errors(text: str, error: str) -> None:
    with pytest.raises(ExprError, match=error):
        parse(text)


def test_filters_at_the_limits_compile_and_run_deep_in_a_stack() -> None:
    """The largest filters the limits allow compile and evaluate with
    hundreds of frames already on the stack (a server handler has some)."""
    columns = column_refs([("a", "bigint")])
    at_limit = [
        "(" * (MAX_FILTER_DEPTH - 1) + "a = 1" + ")" * (MAX_FILTER_DEPTH - 1),
        "not " * (MAX_FILTER_DEPTH - 2) + "a = 1",
        "a" + " + a" * (MAX_FILTER_DEPTH - 2) + " = 1",
        "not " * (MAX_FILTER_DEPTH - 3) + "1 in (" + ",".join(["2"] * MAX_IN_ITEMS) + ")",
        "a = " + "9" * MAX_NUMBER_LENGTH,
    ]

    def run_all(frames: int) -> None:
        if frames:
            return run_all(frames - 1)
        for text in at_limit:
            compile_filter(parse(text), columns, cast_literal).fn((1,))
        return None

    run_all(300)


# -- page tokens --------------------------------------------------------------------


def test_page_tokens_round_trip() -> None:
    token = paging.encode({"name": "b"}, "q1")
    assert paging.decode(token, "q1") == {"name": "b"}
    assert paging.decode("", "q1") is None
    with pytest.raises(InvalidArgument, match="issued for different filters"):
        paging.decode(token, "q2")


def _forged(position: object, query: str, signature: str = "") -> str:
    fingerprint = hashlib.sha256(query.encode()).hexdigest()[:16]
    body = json.dumps({"p": position, "q": fingerprint}).encode()
    text = base64.urlsafe_b64encode(body).decode().rstrip("=")
    return f"{text}.{signature}" if signature else text


def test_forged_and_edited_page_tokens_are_refused() -> None:
    real = paging.encode({"name": "b"}, "q")
    signature = real.partition(".")[2]
    for token in (
        _forged({"name": {"not": "a name"}}, "q"),  # recomputed fingerprint, no signature
        _forged({"name": "c"}, "q", signature),  # someone else's signature
        real[:-2],
        real + "x",
        real.replace(".", ""),
        "\x00",
        "é.é",
        ".",
    ):
        with pytest.raises(InvalidArgument, match="page_token: not a token this server issued"):
            paging.decode(token, "q")


def test_page_tokens_are_bound_to_the_key() -> None:
    token = paging.encode({"name": "b"}, "q")
    try:
        paging.use_key("one secret")
        one = paging.encode({"name": "b"}, "q")
        with pytest.raises(InvalidArgument, match="not a token this server issued"):
            paging.decode(token, "q")
        paging.use_key("another secret")
        with pytest.raises(InvalidArgument, match="not a token this server issued"):
            paging.decode(one, "q")
        paging.use_key("one secret")  # a replica with the same setting accepts it
        assert paging.decode(one, "q") == {"name": "b"}
    finally:
        paging._key = _PROCESS_KEY
