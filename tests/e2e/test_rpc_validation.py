"""Malformed ids and missing required fields, in every RPC of every service,
answer INVALID_ARGUMENT naming the field: validation runs before any handler."""

from __future__ import annotations

from collections.abc import Iterator

import asyncpg
import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message

from setu_client._proto.setu.v1 import (
    admin_pb2,
    agents_pb2,
    connections_pb2,
    jobs_pb2,
    options_pb2,
    pipelines_pb2,
)
from setu_client.channel import open_channel
from setu_server.models import Role
from setu_server.rpc.interceptor import SERVICE_ROLES
from tests.factories import make_tenant
from tests.servers import ADMIN_TOKEN, in_process

GOOD_ID = "0b4f5e2c-1b7e-4f0e-9a55-3c2d1e0f9a11"
FILES = (jobs_pb2, connections_pb2, pipelines_pb2, agents_pb2, admin_pb2)


def _methods() -> Iterator[MethodDescriptor]:
    for module in FILES:
        for service in module.DESCRIPTOR.services_by_name.values():
            yield from service.methods


def _rules(field: FieldDescriptor) -> options_pb2.FieldRules | None:
    options = field.GetOptions()
    return (
        options.Extensions[options_pb2.rules] if options.HasExtension(options_pb2.rules) else None
    )


def _valid_request(method: MethodDescriptor) -> Message:
    request = message_factory.GetMessageClass(method.input_type)()
    for field in method.input_type.fields:
        rules = _rules(field)
        if rules is None or not rules.required:
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(request, field.name).SetInParent()
        elif rules.uuid:
            setattr(request, field.name, GOOD_ID)
        else:
            setattr(request, field.name, "x")
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
    services = {m.containing_service.name for m, _, _ in CASES}
    assert services == {
        "JobOrchestrationService",
        "ConnectionService",
        "PipelineService",
        "AgentService",
        "AdminService",
    }


@pytest.fixture
async def tokens(pool: asyncpg.Pool) -> dict[Role, str]:
    tenant = await make_tenant(pool)
    return {Role.CLIENT: tenant.api_key, Role.AGENT: tenant.agent_token, Role.ADMIN: ADMIN_TOKEN}


async def test_bad_fields_are_invalid_argument_naming_the_field(
    database_url: str, tokens: dict[Role, str]
) -> None:
    failures = []
    async with in_process(database_url) as server:
        channels = {
            role: open_channel(f"127.0.0.1:{server.port}", token) for role, token in tokens.items()
        }
        try:
            for method, field, kind in CASES:
                request = _valid_request(method)
                if kind == "malformed":
                    setattr(request, field, "not-a-uuid")
                    expected = f"{field}: must be a UUID"
                else:
                    request.ClearField(field)
                    expected = f"{field}: required"
                role = SERVICE_ROLES[method.containing_service.full_name]
                code, details = await _call(channels[role], method, request)
                if code != grpc.StatusCode.INVALID_ARGUMENT or expected not in details:
                    failures.append(f"{method.full_name} {kind} {field}: {code.name} {details!r}")
        finally:
            for channel in channels.values():
                await channel.close()
    assert not failures, "\n".join(failures)


async def _call(
    channel: grpc.aio.Channel, method: MethodDescriptor, request: Message
) -> tuple[grpc.StatusCode, str]:
    path = f"/{method.containing_service.full_name}/{method.name}"
    response_class = message_factory.GetMessageClass(method.output_type)
    try:
        if method.server_streaming:
            stream = channel.unary_stream(
                path,
                request_serializer=type(request).SerializeToString,
                response_deserializer=response_class.FromString,
            )(request, timeout=10)
            async for _ in stream:
                break
        else:
            await channel.unary_unary(
                path,
                request_serializer=type(request).SerializeToString,
                response_deserializer=response_class.FromString,
            )(request, timeout=10)
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""
