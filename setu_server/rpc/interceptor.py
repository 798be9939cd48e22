"""The one place every call passes through: request id, authentication,
validation, error mapping and the access log line.

Servicers stay "proto in, domain call, proto out": they raise domain errors
(setu_client.errors) and read the caller from `principal()`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from uuid import UUID

import grpc
from google.protobuf.message import Message

from setu_client.errors import CLOSING_KEY, InvalidArgument, SetuError, Unimplemented, status_of
from setu_client.logs import request_id
from setu_server.metrics import Metrics
from setu_server.models import Principal, Role
from setu_server.rpc.types import Ctx
from setu_server.rpc.validation import validate
from setu_server.service.auth import Authenticator

log = logging.getLogger("setu.rpc")

Trailers = tuple[tuple[str, str], ...]

REQUEST_ID_KEY = "x-request-id"
# Which of a server's processes answered (`setu-server --processes N`): its
# index, 0 to N-1; absent from a server that runs as one process.
PROCESS_KEY = "x-setu-process"

_principal: contextvars.ContextVar[Principal] = contextvars.ContextVar("principal")

# Which credential each service takes; services not listed (health,
# reflection) are public.
SERVICE_ROLES: dict[str, Role] = {
    "setu.v1.JobOrchestrationService": Role.CLIENT,
    "setu.v1.ConnectionService": Role.CLIENT,
    "setu.v1.PipelineService": Role.CLIENT,
    "setu.v1.AgentDirectoryService": Role.CLIENT,
    "setu.v1.AgentService": Role.AGENT,
    "setu.v1.CloudRunService": Role.WORKER,
    "setu.v1.AdminService": Role.ADMIN,
}


def principal() -> Principal:
    """The authenticated caller of the call being served."""
    return _principal.get()


def caller_workspace() -> UUID:
    """The workspace of the API key serving this call."""
    workspace_id = principal().workspace_id
    assert workspace_id is not None, "client calls are authenticated with a workspace key"
    return workspace_id


class CallInterceptor(grpc.aio.ServerInterceptor):
    """Wraps each method's handler once, on its first call, and serves every
    later call of it with the same wrapper: a parked long-poll holds its own
    coroutine and nothing per call besides (no closures, no metadata dict)."""

    def __init__(
        self,
        authenticator: Authenticator,
        metrics: Metrics | None = None,
        closing: asyncio.Event | None = None,
        process: int | None = None,
    ) -> None:
        self._auth = authenticator
        self._served_by: Trailers = () if process is None else ((PROCESS_KEY, str(process)),)
        self._metrics = metrics or Metrics(process=False)
        # Set once this server has begun to shut down: from then on every
        # answer says so in its trailers (CLOSING_KEY).
        self._closing = closing or asyncio.Event()
        # method -> (grpc's handler, ours); grpc's is kept to notice a change.
        self._wrapped: dict[str, tuple[Any, grpc.RpcMethodHandler[Any, Any]]] = {}

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(details)
        if handler is None:
            return handler
        method: str = details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(
        self, method: str, handler: grpc.RpcMethodHandler[Any, Any]
    ) -> grpc.RpcMethodHandler[Any, Any]:
        role = SERVICE_ROLES.get(method.lstrip("/").split("/")[0])
        if role is None:
            return _public(handler)
        call = _Call(self._auth, method, role, self._metrics, self._closing, self._served_by)
        decode = _tolerant(handler.request_deserializer)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                call.unary(handler.unary_unary),
                request_deserializer=decode,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                call.stream(handler.unary_stream),  # type: ignore[arg-type]  # async in grpc.aio
                request_deserializer=decode,
                response_serializer=handler.response_serializer,
            )
        return handler


class Undecodable:
    """What a request that is not valid protobuf for its method decodes to.

    grpc.aio answers a deserializer's exception with UNKNOWN and logs its
    traceback, once per call: any client could fill the log. Decoding
    never fails instead, and the call answers INVALID_ARGUMENT (after
    authentication, like any other bad request)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def refusal(self) -> InvalidArgument:
        # DecodeError's text names the message type and what was wrong.
        return InvalidArgument(f"request: not a valid protobuf message ({self.error})")


def _tolerant(
    deserializer: Callable[[bytes], Any] | None,
) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def decode(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as exc:  # DecodeError, and whatever else bad bytes raise
            return Undecodable(exc)

    return decode


def _public(handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
    """Health and the like take no credentials but get the same treatment of
    undecodable requests. (Reflection streams its requests, and grpc decodes
    those as it reads them; it is left as it is.)"""
    decode = _tolerant(handler.request_deserializer)
    if handler.unary_unary:
        unary: Any = handler.unary_unary  # async in grpc.aio

        async def answer(request: Any, context: Ctx) -> Any:
            if isinstance(request, Undecodable):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(request.refusal()))
            return await unary(request, context)

        return grpc.unary_unary_rpc_method_handler(
            answer, request_deserializer=decode, response_serializer=handler.response_serializer
        )
    if handler.unary_stream:
        streamed: Any = handler.unary_stream  # an async generator in grpc.aio

        async def stream(request: Any, context: Ctx) -> AsyncIterator[Any]:
            if isinstance(request, Undecodable):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(request.refusal()))
            async for response in streamed(request, context):
                yield response

        return grpc.unary_stream_rpc_method_handler(
            stream,
            request_deserializer=decode,
            response_serializer=handler.response_serializer,
        )
    return handler


class _Call:
    """One method's treatment, shared by all its calls (what differs per call
    comes from the call's context)."""

    def __init__(
        self,
        auth: Authenticator,
        method: str,
        role: Role,
        metrics: Metrics,
        closing: asyncio.Event,
        served_by: Trailers = (),
    ) -> None:
        self.auth = auth
        self.served_by = served_by
        self.method = method
        self.role = role
        self.metrics = metrics
        self.closing = closing
        # Long-polls count as parked while they are open; other calls pass.
        self.parked = metrics.parked_gauge(method)
        self.counts = metrics.method(method)

    def unary(self, behavior: Callable[..., Awaitable[Message]]) -> Callable[..., Awaitable[Any]]:
        async def handle(request: Message, context: Ctx) -> Any:
            started, authorization = self._begin(context)
            try:
                await self._admit(request, authorization)
                response = await behavior(request, context)
                if self.auth.unsettled:  # this call revoked a credential
                    await self.auth.settled()
            except BaseException as exc:
                await self._fail(exc, context, started)
                raise
            finally:
                self._unpark()
            self._mark_closing(context)
            self._log(grpc.StatusCode.OK, started)
            return response

        return handle

    def stream(self, behavior: Callable[..., AsyncIterator[Message]]) -> Callable[..., Any]:
        async def handle(request: Message, context: Ctx) -> Any:
            started, authorization = self._begin(context)
            try:
                await self._admit(request, authorization)
                async for response in behavior(request, context):
                    yield response
            except BaseException as exc:
                await self._fail(exc, context, started)
                raise
            finally:
                self._unpark()
            self._mark_closing(context)
            self._log(grpc.StatusCode.OK, started)

        return handle

    def _mark_closing(self, context: Ctx) -> None:
        """A closing server's answer says so, so the client moves to another
        address of its target before its next long-poll rather than after
        a refusal (setu_client/replicas.py)."""
        if self.closing.is_set():
            context.set_trailing_metadata(
                ((REQUEST_ID_KEY, request_id.get()), (CLOSING_KEY, "1"), *self.served_by)
            )

    def _begin(self, context: Ctx) -> tuple[float, str | None]:
        """(when the call began, its authorization header): the call's request
        id set, in its trailers too. One pass over the request's headers."""
        if self.parked is not None:
            self.parked.inc()
        rid: Any = None
        authorization: Any = None
        for name, value in context.invocation_metadata() or ():
            # The first of each counts (grpc lowercases the names).
            if name == "authorization":
                if authorization is None:
                    authorization = value
            elif name == REQUEST_ID_KEY and rid is None:
                rid = value
        rid = str(rid)[:64] if rid else secrets.token_hex(16)
        request_id.set(rid)
        context.set_trailing_metadata(((REQUEST_ID_KEY, rid), *self.served_by))
        # Durations are measured on the host's monotonic clock, not domain time.
        return time.monotonic(), authorization

    def _unpark(self) -> None:
        if self.parked is not None:
            self.parked.dec()

    async def _admit(self, request: Message | Undecodable, authorization: str | None) -> None:
        who = await self.auth.authenticate(authorization, self.role)
        _principal.set(who)
        if isinstance(request, Undecodable):
            raise request.refusal()
        validate(request)

    async def _fail(self, exc: BaseException, context: Ctx, started: float) -> None:
        if isinstance(exc, NotImplementedError):
            exc = Unimplemented(f"{self.method} is not implemented yet")
        if isinstance(exc, asyncio.CancelledError | GeneratorExit) or context.cancelled():
            # The client cancelled, hung up or ran out of time: its business,
            # not the server's trouble, and anyone could make it happen often.
            # A long-poll cut this way is counted: many say a proxy or load
            # balancer in between ends calls before the server answers them.
            cut = self.metrics.long_poll_cut(self.method)
            message = "long-poll cut before it answered" if cut else "call"
            self._log(grpc.StatusCode.CANCELLED, started, level=logging.DEBUG, message=message)
            return
        if isinstance(exc, SetuError):
            code, message, trailers = status_of(exc)
            self._log(code, started, error=message)
            rid = request_id.get()
            if self.closing.is_set():
                trailers = (*trailers, (CLOSING_KEY, "1"))
            await context.abort(code, message, ((REQUEST_ID_KEY, rid), *trailers, *self.served_by))
        elif isinstance(exc, Exception) and not _is_abort(exc):
            log.exception("unexpected error", extra=self._fields(started))
            self._count(grpc.StatusCode.INTERNAL, started)
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"internal error (request id {request_id.get()}); see the server log",
            )

    def _fields(self, started: float) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "method": self.method,
            "duration_ms": round((time.monotonic() - started) * 1000, 2),
        }
        who = _principal.get(None)
        if who is not None:
            fields["role"] = who.role.value
            if who.workspace_id:
                fields["workspace_id"] = str(who.workspace_id)
            if who.agent_id:
                fields["agent_id"] = str(who.agent_id)
        return fields

    def _log(
        self,
        code: grpc.StatusCode,
        started: float,
        error: str = "",
        level: int = logging.INFO,
        message: str = "call",
    ) -> None:
        if log.isEnabledFor(level):  # the fields cost more than the check
            fields = self._fields(started) | {"code": code.name}
            if error:
                fields["error"] = error
            log.log(level, message, extra=fields)
        self._count(code, started)

    def _count(self, code: grpc.StatusCode, started: float) -> None:
        self.counts.handled(code.name, time.monotonic() - started)


def _is_abort(exc: BaseException) -> bool:
    # context.abort() raises this to unwind the handler; it is already a status.
    return type(exc).__name__ == "AbortError"
