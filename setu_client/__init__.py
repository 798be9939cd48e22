"""Setu's Python SDK.

    async with SetuClient("127.0.0.1:50051", api_key) as client:
        job = await client.submit_run(pipeline_id)
        outcome = await client.wait_for_job(job.id)
        if outcome.state is JobState.FAILED: ...

Everything public is importable from here (the list below is pinned by a
test); the modules with a leading underscore are private. The wire messages
returned for connections and pipelines live in `setu_client.messages`, the
errors (one class per status, shared with the server) in `setu_client.errors`.
"""

# Private spellings (and no `from __future__ import annotations`): the
# module's namespace holds the public names and the submodules, nothing else.
import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from setu_client._client import RetryPolicy, SetuClient
    from setu_client._types import (
        TERMINAL_STATES,
        Agent,
        AgentTask,
        DryRunPlan,
        EventLevel,
        Job,
        JobEvent,
        JobKind,
        JobOutcome,
        JobOutputs,
        JobState,
        Phase,
        Placement,
        PlannedColumn,
        PlannedStream,
        Progress,
        SampleCheck,
        SampleFault,
        StreamOutput,
        WriteMode,
        message_to_dict,
        struct_to_dict,
        whole_numbers,
    )
    from setu_client.clock import Clock, FakeClock, SystemClock
    from setu_client.errors import (
        Aborted,
        AgentOffline,
        AlreadyExists,
        Cancelled,
        ClientClosed,
        DatabaseUnavailable,
        DeadlineExceeded,
        FailedPrecondition,
        IllegalTransition,
        Internal,
        InvalidArgument,
        JobNotFound,
        JobNotStarted,
        LeaseLost,
        NotFound,
        PermissionDenied,
        ResourceExhausted,
        SetuError,
        Unauthenticated,
        Unavailable,
        Unimplemented,
    )
    from setu_client.tls import TlsConfig

# Each public name and the module that defines it, imported on first use
# (PEP 562): `import setu_client` costs nothing, and a program that needs
# only the errors or the clock (`setu --help` builds its parser from the
# TLS options alone) never pays for grpc, protobuf and the stubs. The
# table is the list `__all__` holds, and a test pins both.
_EXPORTS: dict[str, str] = {
    # setu_client._types
    "TERMINAL_STATES": "setu_client._types",
    "Agent": "setu_client._types",
    "AgentTask": "setu_client._types",
    "DryRunPlan": "setu_client._types",
    "EventLevel": "setu_client._types",
    "Job": "setu_client._types",
    "JobEvent": "setu_client._types",
    "JobKind": "setu_client._types",
    "JobOutcome": "setu_client._types",
    "JobOutputs": "setu_client._types",
    "JobState": "setu_client._types",
    "Phase": "setu_client._types",
    "Placement": "setu_client._types",
    "PlannedColumn": "setu_client._types",
    "PlannedStream": "setu_client._types",
    "Progress": "setu_client._types",
    "SampleCheck": "setu_client._types",
    "SampleFault": "setu_client._types",
    "StreamOutput": "setu_client._types",
    "WriteMode": "setu_client._types",
    "message_to_dict": "setu_client._types",
    "struct_to_dict": "setu_client._types",
    "whole_numbers": "setu_client._types",
    # setu_client.errors
    "Aborted": "setu_client.errors",
    "AgentOffline": "setu_client.errors",
    "AlreadyExists": "setu_client.errors",
    "Cancelled": "setu_client.errors",
    "ClientClosed": "setu_client.errors",
    "DatabaseUnavailable": "setu_client.errors",
    "DeadlineExceeded": "setu_client.errors",
    "FailedPrecondition": "setu_client.errors",
    "IllegalTransition": "setu_client.errors",
    "Internal": "setu_client.errors",
    "InvalidArgument": "setu_client.errors",
    "JobNotFound": "setu_client.errors",
    "JobNotStarted": "setu_client.errors",
    "LeaseLost": "setu_client.errors",
    "NotFound": "setu_client.errors",
    "PermissionDenied": "setu_client.errors",
    "ResourceExhausted": "setu_client.errors",
    "SetuError": "setu_client.errors",
    "Unauthenticated": "setu_client.errors",
    "Unavailable": "setu_client.errors",
    "Unimplemented": "setu_client.errors",
    # setu_client.clock
    "Clock": "setu_client.clock",
    "FakeClock": "setu_client.clock",
    "SystemClock": "setu_client.clock",
    # setu_client._client
    "RetryPolicy": "setu_client._client",
    "SetuClient": "setu_client._client",
    # setu_client.tls
    "TlsConfig": "setu_client.tls",
}


if not _typing.TYPE_CHECKING:
    # Hidden from the type checker, which reads the imports above: a typo
    # (`setu_client.SetuClinet`) stays an error there.

    def __getattr__(name: str) -> _typing.Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(module), name)
        globals()[name] = value  # the next lookup is a plain global
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))


__all__ = [
    "TERMINAL_STATES",
    "Aborted",
    "Agent",
    "AgentOffline",
    "AgentTask",
    "AlreadyExists",
    "Cancelled",
    "ClientClosed",
    "Clock",
    "DatabaseUnavailable",
    "DeadlineExceeded",
    "DryRunPlan",
    "EventLevel",
    "FailedPrecondition",
    "FakeClock",
    "IllegalTransition",
    "Internal",
    "InvalidArgument",
    "Job",
    "JobEvent",
    "JobKind",
    "JobNotFound",
    "JobNotStarted",
    "JobOutcome",
    "JobOutputs",
    "JobState",
    "LeaseLost",
    "NotFound",
    "PermissionDenied",
    "Phase",
    "Placement",
    "PlannedColumn",
    "PlannedStream",
    "Progress",
    "ResourceExhausted",
    "RetryPolicy",
    "SampleCheck",
    "SampleFault",
    "SetuClient",
    "SetuError",
    "StreamOutput",
    "SystemClock",
    "TlsConfig",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "WriteMode",
    "message_to_dict",
    "struct_to_dict",
    "whole_numbers",
]
