"""Bad input, in every RPC of every service, answers INVALID_ARGUMENT naming
the field, and logs no error: validation runs before any handler.

Malformed ids and missing required fields; NUL characters, NaN and infinity,
nesting and sizes past the declared limits, out-of-range timestamps, forged
page tokens, bytes that are not protobuf. A cancelled call is logged at debug."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory, struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message

from setu_client._proto.setu.v1 import (
    connections_pb2,
    jobs_pb2,
    options_pb2,
    pipelines_pb2,
)
from setu_client.channel import open_channel
from setu_server.models import Role
from setu_server.rpc.interceptor import SERVICE_ROLES
from setu_server.rpc.validation import MAX_STRUCT_DEPTH
from setu_server.server import SERVICE_NAMES, Running
from tests.factories import Tenant, make_connection, make_job, make_pipeline, make_tenant
from tests.servers import ADMIN_TOKEN, in_process

GOOD_ID = "0b4f5e2c-1b7e-4f0e-9a55-3c2d1e0f9a11"


def _methods() -> Iterator[MethodDescriptor]:
    pool = descriptor_pool.Default()
    for name in SERVICE_NAMES:
        yield from pool.FindServiceByName(name).methods


def _rules(field: FieldDescriptor) -> options_pb2.FieldRules | None:
    options = field.GetOptions()
    return (
        options.Extensions[options_pb2.rules] if options.HasExtension(options_pb2.rules) else None
    )


def _fill_required(message: Message) -> None:
    """Required fields that are not set get a valid value, at every depth of
    the messages that are set."""
    for field in message.DESCRIPTOR.fields:
        rules = _rules(field)
        required = rules is not None and rules.required
        if field.type == FieldDescriptor.TYPE_MESSAGE and not field.is_repeated:
            if required or message.HasField(field.name):
                _fill_required(getattr(message, field.name))
                getattr(message, field.name).SetInParent()
        elif not required or getattr(message, field.name):
            continue
        elif field.is_repeated:
            getattr(message, field.name).append("x")
        elif rules is not None and rules.uuid:
            setattr(message, field.name, GOOD_ID)
        elif field.type == FieldDescriptor.TYPE_STRING:
            setattr(message, field.name, "x")
        else:
            setattr(message, field.name, 1)


def _valid_request(method: MethodDescriptor) -> Message:
    request = message_factory.GetMessageClass(method.input_type)()
    _fill_required(request)
    return request


def _cases() -> Iterator[tuple[MethodDescriptor, str, str]]:
    """(method, field, kind) for every uuid field and every required field."""
    for method in _methods():
        for field in method.input_type.fields:
            rules = _rules(field)
            if rules is None:
                continue
            if rules.uuid:
                yield method, field.name, "malformed"
            if rules.required:
                yield method, field.name, "missing"


CASES = list(_cases())


def test_every_service_has_cases() -> None:
    services = {m.containing_service.full_name for m, _, _ in CASES}
    assert services == set(SERVICE_NAMES) == set(SERVICE_ROLES)


# -- plumbing ---------------------------------------------------------------------


class ServerLog(logging.Handler):
    """Every record the server logs while a test runs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.arrived = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.arrived.set()

    def errors(self) -> list[str]:
        return [
            f"{r.name} {r.levelname} {r.getMessage()} {getattr(r, 'method', '')}"
            for r in self.records
            if r.levelno >= logging.ERROR or r.exc_info
        ]


@pytest.fixture
def server_log() -> Iterator[ServerLog]:
    handler = ServerLog()
    loggers = [logging.getLogger(name) for name in ("setu", "grpc")]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for logger, level in zip(loggers, saved, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


class Api:
    """One server, a tenant, and a channel per credential."""

    def __init__(self, server: Running, tenant: Tenant) -> None:
        self.server = server
        self.tenant = tenant
        tokens = {
            Role.CLIENT: tenant.api_key,
            Role.AGENT: tenant.agent_token,
            Role.ADMIN: ADMIN_TOKEN,
            Role.WORKER: getattr(server.services, "worker_token", ""),
        }
        target = f"127.0.0.1:{server.port}"
        self.channels = {role: open_channel(target, token) for role, token in tokens.items()}
        self.anonymous = open_channel(target)

    def channel(self, method: MethodDescriptor) -> grpc.aio.Channel:
        return self.channels[SERVICE_ROLES[method.containing_service.full_name]]

    async def call(
        self, method: MethodDescriptor, request: Message | bytes, timeout: float = 10
    ) -> tuple[grpc.StatusCode, str]:
        return await call(self.channel(method), method, request, timeout)

    async def call_for(self, method: MethodDescriptor, request: Message) -> Any:
        """The answer of a call that must succeed."""
        response_class = message_factory.GetMessageClass(method.output_type)
        return await self.channel(method).unary_unary(
            f"/{method.containing_service.full_name}/{method.name}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_class.FromString,
        )(request, timeout=10)

    async def close(self) -> None:
        for channel in [*self.channels.values(), self.anonymous]:
            await channel.close()


async def call(
    channel: grpc.aio.Channel,
    method: MethodDescriptor,
    request: Message | bytes,
    timeout: float = 10,
) -> tuple[grpc.StatusCode, str]:
    """One call by method descriptor; raw bytes go out as they are."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    serialize = None if isinstance(request, bytes) else type(request).SerializeToString
    try:
        if method.server_streaming:
            stream = channel.unary_stream(path, request_serializer=serialize)(
                request, timeout=timeout
            )
            async for _ in stream:
                break
            stream.cancel()
        else:
            await channel.unary_unary(path, request_serializer=serialize)(request, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


@pytest.fixture
async def api(database_url: str, pool: asyncpg.Pool, tmp_path: Any) -> AsyncIterator[Api]:
    tenant = await make_tenant(pool)
    async with in_process(database_url, data_dir=tmp_path, local_files_root=str(tmp_path)) as s:
        client = Api(s, tenant)
        try:
            yield client
        finally:
            await client.close()


def _method(name: str) -> MethodDescriptor:
    for method in _methods():
        if method.name == name:
            return method
    raise LookupError(name)


# -- malformed ids, missing fields ---------------------------------------------------


async def test_bad_fields_are_invalid_argument_naming_the_field(api: Api) -> None:
    failures = []
    for method, field, kind in CASES:
        request = _valid_request(method)
        if kind == "malformed":
            setattr(request, field, "not-a-uuid")
            expected = f"{field}: must be a UUID"
        else:
            request.ClearField(field)
            expected = f"{field}: required"
        code, details = await api.call(method, request)
        if code != grpc.StatusCode.INVALID_ARGUMENT or expected not in details:
            failures.append(f"{method.full_name} {kind} {field}: {code.name} {details!r}")
    assert not failures, "\n".join(failures)


# -- every string, every Struct, anywhere in a request -------------------------------


def _paths(descriptor: Descriptor, want: str, prefix: str = "") -> Iterator[str]:
    """Dotted paths of the fields of a kind (string / struct / timestamp),
    through nested messages (not repeated ones), a few levels deep."""
    for field in descriptor.fields:
        name = f"{prefix}{field.name}"
        if field.is_repeated:
            continue
        if want == "string" and field.type == FieldDescriptor.TYPE_STRING:
            yield name
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        full_name = field.message_type.full_name
        if full_name == f"google.protobuf.{want.capitalize()}":
            yield name
        elif full_name.startswith("setu.") and prefix.count(".") < 3:
            yield from _paths(field.message_type, want, f"{name}.")


def _at(message: Message, path: str) -> tuple[Message, str]:
    *parents, leaf = path.split(".")
    for name in parents:
        message = getattr(message, name)
    return message, leaf


def _with(method: MethodDescriptor, path: str, fill: Any) -> Message:
    request = message_factory.GetMessageClass(method.input_type)()
    parent, leaf = _at(request, path)
    fill(parent, leaf)
    _fill_required(request)
    return request


async def test_nul_in_any_string_is_invalid_argument(api: Api, server_log: ServerLog) -> None:
    failures = []
    checked = 0
    for method in _methods():
        for path in _paths(method.input_type, "string"):
            request = _with(method, path, lambda m, f: setattr(m, f, "a\x00b"))
            code, details = await api.call(method, request)
            checked += 1
            if code != grpc.StatusCode.INVALID_ARGUMENT or not details.startswith(f"{path}: "):
                failures.append(f"{method.full_name} {path}: {code.name} {details!r}")
    assert checked > 40
    assert not failures, "\n".join(failures)
    assert not server_log.errors()


def _set_struct(value: dict[str, Any]) -> Any:
    def fill(parent: Message, leaf: str) -> None:
        getattr(parent, leaf).update(value)

    return fill


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"port": math.nan}, ".port: must be a finite number, got nan"),
        ({"a": {"b": [1, math.inf]}}, ".a.b[1]: must be a finite number, got inf"),
        ({"a": -math.inf}, ".a: must be a finite number, got -inf"),
        ({"s": "x\x00"}, ".s: must not contain a NUL"),
        ({"k\x00": 1}, " key 'k\\x00': must not contain a NUL"),
    ],
)
async def test_struct_values_that_json_cannot_hold(
    api: Api, server_log: ServerLog, value: dict[str, Any], error: str
) -> None:
    failures = []
    checked = 0
    for method in _methods():
        for path in _paths(method.input_type, "struct"):
            code, details = await api.call(method, _with(method, path, _set_struct(value)))
            checked += 1
            if code != grpc.StatusCode.INVALID_ARGUMENT or f"{path}{error}" not in details:
                failures.append(f"{method.full_name} {path}: {code.name} {details!r}")
    assert checked >= 4
    assert not failures, "\n".join(failures)
    assert not server_log.errors()


def _deep(levels: int) -> struct_pb2.Struct:
    top = struct_pb2.Struct()
    inner = top
    for _ in range(levels - 1):
        inner = inner.fields["a"].struct_value
    inner.fields["b"].number_value = 1
    return top


async def test_deep_structs(api: Api, server_log: ServerLog) -> None:
    create = _method("CreateConnection")
    request = connections_pb2.CreateConnectionRequest(name="c", provider="sqlite")
    request.config.CopyFrom(_deep(MAX_STRUCT_DEPTH + 1))
    code, details = await api.call(create, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith(f"config: nested deeper than {MAX_STRUCT_DEPTH} levels")
    # Deeper than protobuf decodes at all: refused as a request that does not decode.
    request.config.CopyFrom(_deep(60))
    code, details = await api.call(create, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("request: not a valid protobuf message")
    assert not server_log.errors()


async def test_timestamps_out_of_range(api: Api, server_log: ServerLog) -> None:
    failures = []
    for method in _methods():
        for path in _paths(method.input_type, "timestamp"):
            for seconds in (2**62, -(2**62), 253_402_300_800):
                request = _with(
                    method, path, lambda m, f, s=seconds: setattr(getattr(m, f), "seconds", s)
                )
                code, details = await api.call(method, request)
                if code != grpc.StatusCode.INVALID_ARGUMENT or not details.startswith(path):
                    failures.append(f"{method.full_name} {path}: {code.name} {details!r}")
    assert _method("ListJobs").input_type.fields_by_name["created_after"]  # one at least
    assert not failures, "\n".join(failures)
    assert not server_log.errors()


# -- filters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "error"),
    [
        ("(" * 5000 + "a = 1" + ")" * 5000, "nested deeper than"),
        ("not " * 5000 + "a", "nested deeper than"),
        (" or ".join(["a = 1"] * 5000), "nested deeper than"),
        ("a = " + "7" * 5000, "number longer than"),
        ("a in (" + ",".join(["1"] * 5000) + ")", "values in a list"),
    ],
)
async def test_filters_past_the_limits(
    api: Api, pool: asyncpg.Pool, server_log: ServerLog, where: str, error: str
) -> None:
    source = await make_connection(pool, api.tenant.workspace_id)
    destination = await make_connection(pool, api.tenant.workspace_id)
    request = pipelines_pb2.CreatePipelineRequest(
        name="p",
        source_connection_id=str(source.id),
        destination_connection_id=str(destination.id),
    )
    request.spec.update(
        {
            "operators": [
                {"op": "select", "columns": ["a"]},
                {"op": "rename", "columns": {"a": "a"}},
                {"op": "filter", "where": where},
            ]
        }
    )
    code, details = await api.call(_method("CreatePipeline"), request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("spec.operators[2].where: "), details
    assert error in details
    assert not server_log.errors()


# -- page tokens ----------------------------------------------------------------------


def _tampered(token: str, position: dict[str, Any]) -> str:
    """The token with its position replaced: the fingerprint recomputed (it is
    only a hash of the filters), any signature kept."""
    body_text, dot, signature = token.partition(".")
    body = json.loads(base64.urlsafe_b64decode(body_text + "=" * (-len(body_text) % 4)))
    body["p"] = position
    text = base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")
    return text + dot + signature


async def test_forged_page_tokens(api: Api, pool: asyncpg.Pool, server_log: ServerLog) -> None:
    workspace = api.tenant.workspace_id
    for _ in range(2):
        await make_job(pool, workspace)
        pipeline = await make_pipeline(pool, workspace)  # two connections each
    # A job with a timeline of two lines: submitted, then cancelled.
    submitted = await api.call_for(
        _method("SubmitRun"), jobs_pb2.SubmitRunRequest(pipeline_id=str(pipeline.id), start=False)
    )
    job_id = submitted.job.id
    await api.call_for(_method("CancelJob"), jobs_pb2.CancelJobRequest(job_id=job_id))
    bad_positions = [
        {"name": {"not": "text"}},
        {"created_at": "yesterday", "id": "x"},
        {"sequence": "one"},
        {"name": "\x00"},
        {},
    ]
    calls: list[tuple[str, Message]] = [
        ("ListJobs", jobs_pb2.ListJobsRequest(page_size=1)),
        ("ListJobEvents", jobs_pb2.ListJobEventsRequest(job_id=job_id, page_size=1)),
        ("ListConnections", connections_pb2.ListConnectionsRequest(page_size=1)),
        ("ListPipelines", pipelines_pb2.ListPipelinesRequest(page_size=1)),
    ]
    failures = []
    for name, request in calls:
        method = _method(name)
        token = (await api.call_for(method, request)).next_page_token
        assert token, name
        for position in bad_positions:
            forged = type(request)()
            forged.CopyFrom(request)
            forged.page_token = _tampered(token, position)
            code, details = await api.call(method, forged)
            if code != grpc.StatusCode.INVALID_ARGUMENT or not details.startswith("page_token: "):
                failures.append(f"{name} {position}: {code.name} {details!r}")
    assert not failures, "\n".join(failures)
    assert not server_log.errors()


# -- bytes that are not protobuf -------------------------------------------------------

# Corrupt for any message: a truncated length, a varint of 11 bytes, an end-group tag.
GARBAGE = [b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x08" + b"\xff" * 11, b"\x0c"]
INVALID_UTF8 = b"\x0a\x02\xc3\x28"  # field 1, two bytes that are not UTF-8


async def test_undecodable_requests(api: Api, server_log: ServerLog) -> None:
    failures = []
    for method in _methods():
        field_1 = method.input_type.fields_by_number.get(1)
        text_first = field_1 is not None and field_1.type == FieldDescriptor.TYPE_STRING
        for raw in [*GARBAGE, INVALID_UTF8] if text_first else GARBAGE:
            code, details = await api.call(method, raw)
            if code != grpc.StatusCode.INVALID_ARGUMENT or not details.startswith(
                "request: not a valid protobuf message"
            ):
                failures.append(f"{method.full_name} {raw!r}: {code.name} {details!r}")
        # ...and only once the caller is known.
        code, _ = await call(api.anonymous, method, GARBAGE[0])
        if code != grpc.StatusCode.UNAUTHENTICATED:
            failures.append(f"{method.full_name} anonymous: {code.name}")
    health = descriptor_pool.Default().FindServiceByName("grpc.health.v1.Health")
    code, _ = await call(api.anonymous, health.methods_by_name["Check"], GARBAGE[0])
    if code != grpc.StatusCode.INVALID_ARGUMENT:
        failures.append(f"Health.Check: {code.name}")
    assert not failures, "\n".join(failures)
    assert not server_log.errors()


# -- cancelled calls -------------------------------------------------------------------


async def test_a_cancelled_watch_is_logged_at_debug(
    api: Api, pool: asyncpg.Pool, server_log: ServerLog
) -> None:
    job = await make_job(pool, api.tenant.workspace_id)
    method = _method("WatchJob")
    stream = api.channel(method).unary_stream(
        f"/{method.containing_service.full_name}/WatchJob",
        request_serializer=jobs_pb2.WatchJobRequest.SerializeToString,
        response_deserializer=jobs_pb2.WatchJobResponse.FromString,
    )(jobs_pb2.WatchJobRequest(job_id=str(job.id)))
    async for answer in stream:
        assert answer.job.id == str(job.id)
        break  # the first snapshot; the server now waits for the next
    stream.cancel()

    def watch_lines() -> list[logging.LogRecord]:
        return [r for r in server_log.records if getattr(r, "method", "").endswith("/WatchJob")]

    async with asyncio.timeout(10):
        while not watch_lines():
            server_log.arrived.clear()
            await server_log.arrived.wait()
    [line] = watch_lines()
    assert line.levelno == logging.DEBUG
    assert getattr(line, "code", "") == "CANCELLED"
    assert not server_log.errors()
