"""AgentDirectoryService: a workspace's agents as its clients see them.
Proto in, domain call, proto out."""

from __future__ import annotations

from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc
from setu_server.rpc import convert
from setu_server.rpc.agents import TASK_KINDS
from setu_server.rpc.convert import uid
from setu_server.rpc.interceptor import caller_workspace
from setu_server.rpc.types import Ctx
from setu_server.service.agents import AgentPresence, AgentStatus


def workspace_agent(status: AgentStatus) -> pb.WorkspaceAgent:
    a, work = status.agent, status.work
    return pb.WorkspaceAgent(
        id=str(a.id),
        name=a.name,
        active=a.active,
        online=status.online,
        last_seen_at=convert.ts(a.last_seen_at),
        signed_off_at=convert.ts(a.signed_off_at),
        version=a.version,
        hostname=a.hostname,
        capabilities=a.capabilities,
        created_at=convert.ts(a.created_at),
        running=[
            pb.AgentTask(
                task_id=str(t.id),
                job_id=str(t.job_id),
                pipeline_id=str(t.pipeline_id) if t.pipeline_id else "",
                kind=TASK_KINDS[t.kind],
                attempt=t.attempt,
                lease_expires_at=convert.ts(t.lease_expires_at),
            )
            for t in work.running
        ],
        queued_tasks=work.queued,
    )


class AgentDirectoryServicer(agents_pb2_grpc.AgentDirectoryServiceServicer):
    def __init__(self, presence: AgentPresence) -> None:
        self._presence = presence

    async def ListWorkspaceAgents(
        self, request: pb.ListWorkspaceAgentsRequest, context: Ctx
    ) -> pb.ListWorkspaceAgentsResponse:
        only = uid(request.agent_id) if request.agent_id else None
        found, token = await self._presence.list_agents(
            caller_workspace(), only, request.page_size, request.page_token
        )
        return pb.ListWorkspaceAgentsResponse(
            agents=[workspace_agent(s) for s in found], next_page_token=token
        )
