"""A dry run's plan, made where the data lives (docs/flows.md, "Dry runs").

The source half is made where the source's streams are known (the cloud's
migrate, or here from a source agent's discover); the destination half runs
where the load would run (the cloud's migrate, or a `load` task on the
destination's agent, handed the plan in its payload), because only that
runtime may resolve the destination's secrets. The plan then ends the run:
SUCCEEDED when nothing would stop the real run, FAILED with every reason
otherwise; either way the plan is the job's result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from setu_engine.movement import dry_run
from setu_engine.operators.chain import parse_spec
from setu_engine.planning.plans import PlannedStream, SampleCheck, incompatibilities
from setu_engine.values.types import Stream
from setu_server.models import EventLevel, Job, JobState, Task, TaskKind, runtime_name
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.runs import RunService, snapshot_of
from setu_server.store.db import Executor
from setu_tasks.results import MigrateMode, MigrateResult


class DryRunPlans:
    def __init__(self, lifecycle: JobLifecycle, runs_service: RunService) -> None:
        self._lifecycle = lifecycle
        self._runs = runs_service

    async def source_discovered(
        self,
        db: Executor,
        task: Task,
        job: Job,
        streams: Sequence[Stream],
        samples: Mapping[str, SampleCheck],
    ) -> list[Job]:
        """A source agent's discover: the source half is made here, with the
        samples the agent checked, and the plan goes on to where the load
        would run."""
        taken = snapshot_of(job)
        planned = dry_run.plan(parse_spec(taken.spec), streams, taken.write_mode)
        planned = dry_run.with_samples(planned, samples)
        await self._runs.dispatch_dry_run_plan(db, job, _plan_json(planned))
        return []

    async def planned(
        self, db: Executor, task: Task, job: Job, planned: tuple[PlannedStream, ...]
    ) -> list[Job]:
        """A plan from a migrate or a load: complete (the destination was
        inspected) it ends the run; from a migrate whose load runs on an
        agent, it goes on to that agent."""
        handed_on = task.kind is TaskKind.MIGRATE and snapshot_of(job).placement.load_agent
        if handed_on:
            await self._runs.dispatch_dry_run_plan(db, job, _plan_json(planned))
            return []
        return await self.end(db, task, job, planned)

    async def end(
        self, db: Executor, task: Task, job: Job, planned: tuple[PlannedStream, ...]
    ) -> list[Job]:
        where = runtime_name(task.runtime)
        result = MigrateResult(MigrateMode.DRY_RUN, planned=planned).to_json()
        problems = incompatibilities(planned)
        # A sample checked is said plainly, so a clean one reads as what it is.
        sampled = "".join(f"; {p.sample.said(p.stream)}" for p in planned if p.sample)
        if problems:
            listed = "; ".join(problems)
            return await self._lifecycle.transition_many(
                [job.id],
                JobState.FAILED,
                f"Dry run: the run would fail ({len(problems)} incompatibilit"
                f"{'y' if len(problems) == 1 else 'ies'}, destination inspected on {where}"
                f"{sampled}): {listed}",
                db=db,
                level=EventLevel.ERROR,
                error_message=f"dry run: the run would fail: {listed}",
                result=result,
            )
        return await self._lifecycle.transition_many(
            [job.id],
            JobState.SUCCEEDED,
            f"Dry run: planned {len(planned)} stream(s), destination inspected on {where}"
            f"{sampled}; nothing was staged or written",
            db=db,
            result=result,
        )


def _plan_json(planned: tuple[PlannedStream, ...]) -> list[dict[str, object]]:
    return [p.to_json() for p in planned]
