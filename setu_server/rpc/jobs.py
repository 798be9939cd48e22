"""JobOrchestrationService: proto in, domain call, proto out."""

from __future__ import annotations

from collections.abc import AsyncIterator

from setu_client._proto.setu.v1 import jobs_pb2 as pb
from setu_client._proto.setu.v1 import jobs_pb2_grpc
from setu_server.config import Settings
from setu_server.models import Job
from setu_server.rpc import convert
from setu_server.rpc.convert import uid
from setu_server.rpc.interceptor import caller_workspace
from setu_server.rpc.types import Ctx
from setu_server.service.jobs import JobService
from setu_server.service.runs import RunService
from setu_tasks.codec.common import changes_message

# Answer this long before the caller's deadline, so a long-poll ends in OK
# rather than DEADLINE_EXCEEDED (docs/jobs-and-tasks.md, WaitJob).
DEADLINE_MARGIN_SECONDS = 1.0


def wait_answer(job: Job) -> pb.WaitJobResponse:
    return pb.WaitJobResponse(
        job_id=str(job.id),
        state=convert.JOB_STATES[job.state],
        error_message=job.error_message,
        version=job.version,
        terminal=job.state.terminal,
    )


class JobServicer(jobs_pb2_grpc.JobOrchestrationServiceServicer):
    def __init__(self, jobs: JobService, runs: RunService, settings: Settings) -> None:
        self._jobs = jobs
        self._runs = runs
        self._settings = settings

    async def SubmitRun(self, request: pb.SubmitRunRequest, context: Ctx) -> pb.SubmitRunResponse:
        job = await self._runs.submit(
            caller_workspace(),
            uid(request.pipeline_id),
            start=request.start,
            dry_run=request.dry_run,
            idempotency_key=request.idempotency_key,
            rerun_of=uid(request.rerun_of) if request.rerun_of else None,
        )
        return pb.SubmitRunResponse(job=convert.job(job))

    async def GetJob(self, request: pb.GetJobRequest, context: Ctx) -> pb.GetJobResponse:
        job = await self._jobs.get(caller_workspace(), uid(request.job_id))
        return pb.GetJobResponse(job=convert.job(job))

    async def WaitJob(self, request: pb.WaitJobRequest, context: Ctx) -> pb.WaitJobResponse:
        max_wait = self._settings.wait_cap_seconds
        remaining = context.time_remaining()
        if remaining is not None:
            max_wait = min(max_wait, remaining - DEADLINE_MARGIN_SECONDS)
        job = await self._jobs.wait(caller_workspace(), uid(request.job_id), max_wait)
        # Every waiter of a version gets this one message (read-only from here).
        return self._jobs.answer(job, wait_answer)

    async def WatchJob(
        self, request: pb.WatchJobRequest, context: Ctx
    ) -> AsyncIterator[pb.WatchJobResponse]:
        # Like WaitJob, end cleanly a second before the caller's deadline:
        # the SDK resumes from the last version it saw.
        remaining = context.time_remaining()
        max_wait = None if remaining is None else remaining - DEADLINE_MARGIN_SECONDS
        async for job in self._jobs.watch(
            caller_workspace(), uid(request.job_id), request.from_version, max_wait
        ):
            yield pb.WatchJobResponse(job=convert.job(job))

    async def StartJob(self, request: pb.StartJobRequest, context: Ctx) -> pb.StartJobResponse:
        job = await self._jobs.start(caller_workspace(), uid(request.job_id))
        return pb.StartJobResponse(job=convert.job(job))

    async def CancelJob(self, request: pb.CancelJobRequest, context: Ctx) -> pb.CancelJobResponse:
        job = await self._jobs.cancel(
            caller_workspace(), uid(request.job_id), request.reason.strip()
        )
        return pb.CancelJobResponse(job=convert.job(job))

    async def ListJobs(self, request: pb.ListJobsRequest, context: Ctx) -> pb.ListJobsResponse:
        found, token = await self._jobs.list_jobs(
            caller_workspace(), convert.job_filter(request), request.page_size, request.page_token
        )
        return pb.ListJobsResponse(jobs=[convert.job(j) for j in found], next_page_token=token)

    async def ListJobEvents(
        self, request: pb.ListJobEventsRequest, context: Ctx
    ) -> pb.ListJobEventsResponse:
        found, token = await self._jobs.events(
            caller_workspace(),
            uid(request.job_id),
            request.after_sequence,
            request.page_size,
            request.page_token,
        )
        return pb.ListJobEventsResponse(
            events=[convert.job_event(e) for e in found], next_page_token=token
        )

    async def GetJobOutputs(
        self, request: pb.GetJobOutputsRequest, context: Ctx
    ) -> pb.GetJobOutputsResponse:
        job, streams = await self._jobs.outputs(caller_workspace(), uid(request.job_id))
        return pb.GetJobOutputsResponse(
            job_id=str(job.id),
            streams=[
                pb.StreamOutput(
                    stream=s.stream,
                    rows_extracted=s.rows_extracted,
                    rows_loaded=s.rows_loaded,
                    checksum=s.checksum,
                    changes=changes_message(s.changes) if s.changes is not None else None,
                )
                for s in streams
            ],
            totals=convert.progress_message(job),
        )
