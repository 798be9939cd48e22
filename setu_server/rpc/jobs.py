"""JobOrchestrationService: proto in, domain call, proto out."""

from __future__ import annotations

from uuid import UUID

from setu_client._proto.setu.v1 import jobs_pb2 as pb
from setu_client._proto.setu.v1 import jobs_pb2_grpc
from setu_server.rpc import convert
from setu_server.rpc.convert import uid
from setu_server.rpc.interceptor import principal
from setu_server.rpc.types import Ctx
from setu_server.service.jobs import JobService


class JobServicer(jobs_pb2_grpc.JobOrchestrationServiceServicer):
    def __init__(self, jobs: JobService) -> None:
        self._jobs = jobs

    async def GetJob(self, request: pb.GetJobRequest, context: Ctx) -> pb.GetJobResponse:
        job = await self._jobs.get(_workspace(), uid(request.job_id))
        return pb.GetJobResponse(job=convert.job(job))


def _workspace() -> UUID:
    workspace_id = principal().workspace_id
    assert workspace_id is not None, "client calls are authenticated with a workspace key"
    return workspace_id
