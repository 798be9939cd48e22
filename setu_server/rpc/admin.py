"""AdminService: proto in, domain call, proto out."""

from __future__ import annotations

from setu_client._proto.setu.v1 import admin_pb2 as pb
from setu_client._proto.setu.v1 import admin_pb2_grpc
from setu_server.models import Agent
from setu_server.rpc import convert
from setu_server.rpc.convert import uid
from setu_server.rpc.types import Ctx
from setu_server.service.admin import AdminService
from setu_server.service.agents import AgentPresence


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, admin: AdminService, presence: AgentPresence) -> None:
        self._admin = admin
        self._presence = presence

    def _agent(self, found: Agent) -> pb.Agent:
        return convert.agent(found, self._presence.online(found))

    async def CreateWorkspace(
        self, request: pb.CreateWorkspaceRequest, context: Ctx
    ) -> pb.Workspace:
        return convert.workspace(await self._admin.create_workspace(request.name.strip()))

    async def GetWorkspace(self, request: pb.GetWorkspaceRequest, context: Ctx) -> pb.Workspace:
        return convert.workspace(await self._admin.get_workspace(uid(request.workspace_id)))

    async def ListWorkspaces(
        self, request: pb.ListWorkspacesRequest, context: Ctx
    ) -> pb.ListWorkspacesResponse:
        found = await self._admin.list_workspaces()
        return pb.ListWorkspacesResponse(workspaces=[convert.workspace(w) for w in found])

    async def CreateApiKey(
        self, request: pb.CreateApiKeyRequest, context: Ctx
    ) -> pb.CreateApiKeyResponse:
        created = await self._admin.create_api_key(uid(request.workspace_id), request.name.strip())
        return pb.CreateApiKeyResponse(
            api_key=convert.api_key(created.value), secret=created.secret
        )

    async def ListApiKeys(
        self, request: pb.ListApiKeysRequest, context: Ctx
    ) -> pb.ListApiKeysResponse:
        keys = await self._admin.list_api_keys(uid(request.workspace_id))
        return pb.ListApiKeysResponse(api_keys=[convert.api_key(k) for k in keys])

    async def RevokeApiKey(self, request: pb.RevokeApiKeyRequest, context: Ctx) -> pb.ApiKey:
        return convert.api_key(await self._admin.revoke_api_key(uid(request.api_key_id)))

    async def CreateAgent(
        self, request: pb.CreateAgentRequest, context: Ctx
    ) -> pb.CreateAgentResponse:
        created = await self._admin.create_agent(uid(request.workspace_id), request.name.strip())
        return pb.CreateAgentResponse(agent=self._agent(created.value), token=created.secret)

    async def GetAgent(self, request: pb.GetAgentRequest, context: Ctx) -> pb.Agent:
        return self._agent(await self._admin.get_agent(uid(request.agent_id)))

    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: Ctx
    ) -> pb.ListAgentsResponse:
        found = await self._admin.list_agents(uid(request.workspace_id))
        return pb.ListAgentsResponse(agents=[self._agent(a) for a in found])

    async def DeactivateAgent(self, request: pb.DeactivateAgentRequest, context: Ctx) -> pb.Agent:
        return self._agent(await self._admin.deactivate_agent(uid(request.agent_id)))
