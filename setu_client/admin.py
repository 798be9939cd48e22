"""AdminService, for operators: its stub and messages.

Calls take the admin token (`open_channel(target, admin_token)`). Import
these from here: `setu_client._proto` is generated code whose layout may
change.
"""

from typing import TYPE_CHECKING

from setu_client._proto.setu.v1.admin_pb2 import (
    Agent,
    ApiKey,
    CreateAgentRequest,
    CreateAgentResponse,
    CreateApiKeyRequest,
    CreateApiKeyResponse,
    CreateWorkspaceRequest,
    DeactivateAgentRequest,
    GetAgentRequest,
    GetWorkspaceRequest,
    ListAgentsRequest,
    ListAgentsResponse,
    ListApiKeysRequest,
    ListApiKeysResponse,
    ListWorkspacesRequest,
    ListWorkspacesResponse,
    RevokeApiKeyRequest,
    Workspace,
)
from setu_client._proto.setu.v1.admin_pb2_grpc import AdminServiceStub

if TYPE_CHECKING:
    from setu_client._proto.setu.v1.admin_pb2_grpc import AdminServiceAsyncStub
else:
    # Only the type stubs tell the grpc.aio stub apart; at run time it is one class.
    AdminServiceAsyncStub = AdminServiceStub

__all__ = [
    "AdminServiceAsyncStub",
    "AdminServiceStub",
    "Agent",
    "ApiKey",
    "CreateAgentRequest",
    "CreateAgentResponse",
    "CreateApiKeyRequest",
    "CreateApiKeyResponse",
    "CreateWorkspaceRequest",
    "DeactivateAgentRequest",
    "GetAgentRequest",
    "GetWorkspaceRequest",
    "ListAgentsRequest",
    "ListAgentsResponse",
    "ListApiKeysRequest",
    "ListApiKeysResponse",
    "ListWorkspacesRequest",
    "ListWorkspacesResponse",
    "RevokeApiKeyRequest",
    "Workspace",
]
