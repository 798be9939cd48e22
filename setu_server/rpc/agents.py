"""AgentService: runtimes check in, lease, heartbeat and report.

Leasing and results arrive with the runtimes issue; until then those RPCs
answer UNIMPLEMENTED through the generated base class.
"""

from __future__ import annotations

from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc
from setu_server.config import Settings
from setu_server.rpc import convert
from setu_server.rpc.interceptor import principal
from setu_server.rpc.types import Ctx
from setu_server.service.agents import AgentPresence

# A lease lasts this long without a heartbeat (DESIGN §5).
LEASE_TTL_SECONDS = 60


class AgentServicer(agents_pb2_grpc.AgentServiceServicer):
    def __init__(self, presence: AgentPresence, settings: Settings) -> None:
        self._presence = presence
        self._settings = settings

    async def CheckIn(self, request: pb.CheckInRequest, context: Ctx) -> pb.CheckInResponse:
        me = principal()
        assert me.agent_id is not None
        agent = await self._presence.check_in(
            me.agent_id, request.version, list(request.capabilities), request.hostname
        )
        return pb.CheckInResponse(
            agent_id=str(agent.id),
            workspace_id=str(agent.workspace_id),
            server_time=convert.ts(agent.last_seen_at),
            lease_wait_cap_seconds=int(self._settings.lease_wait_cap_seconds),
            lease_ttl_seconds=LEASE_TTL_SECONDS,
        )
