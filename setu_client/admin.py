"""AdminService, for operators: `AdminClient`, and the stub and messages.

    async with AdminClient("127.0.0.1:50051", admin_token) as admin:
        workspace = await admin.create_workspace("acme")
        key = await admin.create_api_key(workspace.id, "ci")  # key.secret, shown once

Calls take the admin token; a refused call raises the `setu_client.errors`
class of its status, as SetuClient's do. Import these from here:
`setu_client._proto` is generated code whose layout may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc

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
from setu_client.channel import open_channel
from setu_client.errors import from_rpc_error
from setu_client.tls import TlsConfig

if TYPE_CHECKING:
    from setu_client._proto.setu.v1.admin_pb2_grpc import AdminServiceAsyncStub
else:
    # Only the type stubs tell the grpc.aio stub apart; at run time it is one class.
    AdminServiceAsyncStub = AdminServiceStub


class AdminClient:
    """An asyncio client for AdminService, signed with the admin token.

    Use as `async with AdminClient(target, admin_token) as admin: ...`, or
    call `close()`. Each method is one call, not retried (an operator's
    command, run again by hand); `call_timeout` bounds each (None: no
    deadline). Answers are the messages of this module (`Workspace`,
    `ApiKey`, `Agent`, and the create responses that carry the secret).
    TLS as SetuClient takes it.
    """

    def __init__(
        self,
        target: str,
        admin_token: str,
        *,
        tls: bool | TlsConfig = False,
        root_certificates: bytes | None = None,
        call_timeout: float | None = 30.0,
    ) -> None:
        self._channel = open_channel(
            target, admin_token, tls=tls, root_certificates=root_certificates
        )
        self._stub: AdminServiceAsyncStub = AdminServiceStub(self._channel)
        self._call_timeout = call_timeout

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close(grace=None)

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, timeout=self._call_timeout)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from None  # grpc's error is its .rpc_error

    # -- workspaces

    async def create_workspace(self, name: str) -> Workspace:
        """Raises AlreadyExists when the name is taken."""
        answer: Workspace = await self._call(
            self._stub.CreateWorkspace, CreateWorkspaceRequest(name=name)
        )
        return answer

    async def get_workspace(self, workspace_id: str) -> Workspace:
        answer: Workspace = await self._call(
            self._stub.GetWorkspace, GetWorkspaceRequest(workspace_id=workspace_id)
        )
        return answer

    async def list_workspaces(self) -> list[Workspace]:
        """Every workspace, ordered by name."""
        answer: ListWorkspacesResponse = await self._call(
            self._stub.ListWorkspaces, ListWorkspacesRequest()
        )
        return list(answer.workspaces)

    # -- API keys

    async def create_api_key(self, workspace_id: str, name: str) -> CreateApiKeyResponse:
        """The key and its `secret`, which only this answer shows."""
        answer: CreateApiKeyResponse = await self._call(
            self._stub.CreateApiKey, CreateApiKeyRequest(workspace_id=workspace_id, name=name)
        )
        return answer

    async def list_api_keys(self, workspace_id: str) -> list[ApiKey]:
        answer: ListApiKeysResponse = await self._call(
            self._stub.ListApiKeys, ListApiKeysRequest(workspace_id=workspace_id)
        )
        return list(answer.api_keys)

    async def revoke_api_key(self, api_key_id: str) -> ApiKey:
        """Idempotent: revoking a revoked key returns it unchanged."""
        answer: ApiKey = await self._call(
            self._stub.RevokeApiKey, RevokeApiKeyRequest(api_key_id=api_key_id)
        )
        return answer

    # -- agents

    async def create_agent(self, workspace_id: str, name: str) -> CreateAgentResponse:
        """The agent and its `token`, which only this answer shows."""
        answer: CreateAgentResponse = await self._call(
            self._stub.CreateAgent, CreateAgentRequest(workspace_id=workspace_id, name=name)
        )
        return answer

    async def get_agent(self, agent_id: str) -> Agent:
        answer: Agent = await self._call(self._stub.GetAgent, GetAgentRequest(agent_id=agent_id))
        return answer

    async def list_agents(self, workspace_id: str) -> list[Agent]:
        answer: ListAgentsResponse = await self._call(
            self._stub.ListAgents, ListAgentsRequest(workspace_id=workspace_id)
        )
        return list(answer.agents)

    async def deactivate_agent(self, agent_id: str) -> Agent:
        """Stops the agent's token from working; idempotent."""
        answer: Agent = await self._call(
            self._stub.DeactivateAgent, DeactivateAgentRequest(agent_id=agent_id)
        )
        return answer


__all__ = [
    "AdminClient",
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
