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
