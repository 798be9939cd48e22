"""The SDK's public surface changes only on purpose: this list is it."""

from __future__ import annotations

import setu_client
import setu_client.admin
import setu_client.messages

PUBLIC = [
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

MESSAGES = [
    "CatalogStream",
    "Column",
    "Connection",
    "DiscoverStreamsResponse",
    "Pipeline",
    "PipelineState",
    "PreviewStreamResponse",
    "StreamCursor",
    "StreamState",
    "TestConnectionResponse",
]


def test_the_public_names_are_exactly_these() -> None:
    assert setu_client.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(setu_client, name) is not None, name


def test_every_public_name_comes_from_its_module_not_a_stray_import() -> None:
    # A name imported into __init__ for internal use and not listed would
    # slip into `from setu_client import *` unnoticed; nothing else is public.
    # The public names load on first use (PEP 562): touch each first.
    for name in PUBLIC:
        getattr(setu_client, name)
    module_attrs = {n for n in vars(setu_client) if not n.startswith("_")}
    submodules = {
        *("admin", "channel", "clock", "diagnose", "errors", "logs"),
        *("long_poll", "messages", "replicas", "tls", "version"),
    }
    assert module_attrs - submodules == set(PUBLIC)


def test_messages_for_connections_and_pipelines_are_public() -> None:
    assert setu_client.messages.__all__ == MESSAGES
    assert setu_client.messages.Connection.DESCRIPTOR.full_name == "setu.v1.Connection"


def test_admin_surface_lists_what_it_exports() -> None:
    exported = set(setu_client.admin.__all__)
    assert {"AdminServiceStub", "CreateWorkspaceRequest", "Workspace"} <= exported
    assert all(hasattr(setu_client.admin, name) for name in exported)


def test_a_database_outage_is_caught_by_its_public_name_apart_from_other_unavailables() -> None:
    import setu_client.errors

    assert setu_client.DatabaseUnavailable is setu_client.errors.DatabaseUnavailable
    assert issubclass(setu_client.DatabaseUnavailable, setu_client.Unavailable)
    assert setu_client.DatabaseUnavailable.reason == "database_unavailable"
