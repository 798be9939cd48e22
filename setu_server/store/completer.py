"""The task completer: a completion the task service decided, recorded in
its batch's transaction, with the success's outcome inside it.

The task service decides once what a completion is (a `Completion`: whose
lease, what result, whether its success ends the job) and hands the plain
value here. The completer owns everything below: the statements, the group
commit the completion shares with the leases and completions arriving at
the same moment (store/group_commit.py: savepoints, `lock_timeout`, a part
retried alone), the merged statement of the completions that end their
jobs, and the answer to a completion the statements left out (a repeat of
one already recorded is accepted; otherwise the lease is lost, or the
result does not fit the task). It answers what the committed completion
moved (`Completed`); the service publishes that, after commit.

A success that ends its job SUCCEEDED with the result (test, preview, a
finished migrate) is one statement, which only completes a task of the
kind the result says. Any other success completes the task, checks its
kind, then calls back the `SuccessOutcome` (service/outcomes.py) on the
same connection, so what the success means for the job commits, or rolls
back, with it.

A result is validated once: a completion that ends its job before it
queues (as the one statement would refuse it), any other after its task's
kind is checked, inside the transaction, so a lost lease or a result of the
wrong kind is answered first, as it always was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Generic, Protocol, TypeVar
from uuid import UUID

from setu_client.clock import Clock
from setu_client.errors import InvalidArgument
from setu_server.models import Job, Task, TaskState
from setu_server.store import tasks
from setu_server.store.db import Executor
from setu_server.store.group_commit import GroupCommit, Merge
from setu_tasks.results import TaskResult

Row = TypeVar("Row")


@dataclass(frozen=True)
class Completion:
    """One runtime's report that its leased task succeeded, as decided."""

    task_id: UUID
    runtime: str
    token: UUID
    # None: nothing to record (refused, unless this lease already completed it).
    result: TaskResult | None
    # The success ends the job SUCCEEDED with the result: one statement.
    ends_job: bool
    # Also lease the runtime's next task in the same transaction (an eager lease).
    lease_next: bool = False


@dataclass(frozen=True)
class Completed:
    """What a committed completion moved, for the service to publish."""

    # The job that the one statement ended (committed, not yet counted).
    ended: Job | None = None
    # The jobs the outcome moved through the lifecycle (held until published).
    changed: list[Job] = field(default_factory=list)


# A repeat, or a completion that moved nothing.
NOTHING = Completed()


class SuccessOutcome(Protocol):
    """What a success that does not just end its job means for the job, on
    the completion's connection: the jobs it moved."""

    async def succeeded(self, db: Executor, task: Task, result: TaskResult) -> list[Job]: ...


class TaskCompleter(Generic[Row]):
    def __init__(self, group: GroupCommit[Row], outcome: SuccessOutcome, clock: Clock) -> None:
        self._group = group
        self._outcome = outcome
        self._clock = clock

    async def complete(self, completion: Completion) -> tuple[Completed, list[Row]]:
        """What the completion moved, once its batch committed, and the task
        leased after it (`lease_next`) if any; or why it was refused."""
        result = completion.result
        merge: Merge[Completion, Completed] | None = None
        if result is not None and completion.ends_job:
            result.validate()  # as the statement would: refused before it queues
            # Beside other such completions: one statement for all of them.
            merge = Merge(self._complete_merged, completion)
        return await self._group.run(
            partial(self._complete_one, completion),
            then_lease=completion.runtime if completion.lease_next else None,
            # Its success ends its job: one statement, no transaction needed.
            one_statement=completion.ends_job,
            merge=merge,
        )

    async def _complete_one(self, completion: Completion, db: Executor) -> Completed:
        """The completion on `db` (a transaction's connection unless it ends
        its job: one statement)."""
        completed = await self._record(completion, db)
        if completed is None:
            await self._repeat_or_refuse(completion, db)
            return NOTHING
        return completed

    async def _record(self, completion: Completion, db: Executor) -> Completed | None:
        """What the completion moved, or None when its statement completed nothing."""
        result = completion.result
        if result is None:
            return None
        id, runtime, token = completion.task_id, completion.runtime, completion.token
        now = self._clock.sql_now()
        if completion.ends_job:
            done = await tasks.complete_task_and_job(
                db, id, runtime, token, result.to_json(), now, result.kind
            )
            return Completed(ended=done[1]) if done is not None else None
        task = await tasks.complete_task(db, id, runtime, token, result.to_json(), now)
        if task is None:
            return None
        if result.kind != task.kind.value:
            raise _wrong_result(task, result.kind)  # rolls the completion back
        result.validate()  # so does a malformed one
        return Completed(changed=await self._outcome.succeeded(db, task, result))

    async def _complete_merged(
        self, db: Executor, asked: list[Completion]
    ) -> list[Completed | None]:
        """Completions whose success ends their job, in one statement: what
        each moved, or None for one the statement left out (refused or a
        repeat: its caller's part runs alone and says which)."""
        results = [_recorded(one) for one in asked]
        rows = await tasks.complete_tasks_and_jobs(
            db,
            [one.task_id for one in asked],
            [one.token for one in asked],
            [result.to_json() for result in results],
            [result.kind for result in results],
            [one.runtime for one in asked],
            self._clock.sql_now(),
        )
        done = {(task.id, task.lease_token, task.runtime): job for task, job in rows}
        answers: list[Completed | None] = []
        for one in asked:
            key = (one.task_id, one.token, one.runtime)
            answers.append(Completed(ended=done.pop(key)) if key in done else None)
        return answers

    async def _repeat_or_refuse(self, completion: Completion, db: Executor) -> None:
        """Nothing was completed: fine if this lease already completed it,
        else the lease is lost, or the result does not fit the task (which
        only a completion that ends its job, or has no result, can learn
        here: any other has its kind checked once its task completed)."""
        result = completion.result
        claimed = "none" if result is None else result.kind if completion.ends_job else None
        existing = await tasks.own_task(db, completion.task_id, completion.runtime)
        live = tasks.lease_live(existing, completion.token, self._clock.now())
        if live and claimed is not None and claimed != existing.kind.value:
            raise _wrong_result(existing, claimed)
        if existing.state is not TaskState.SUCCEEDED or existing.lease_token != completion.token:
            raise tasks.lease_lost(existing)


def _wrong_result(task: Task, claimed: str) -> InvalidArgument:
    kind = task.kind.value
    return InvalidArgument(
        f"task {task.id} is a {kind} task: its result must be a {kind} result, not {claimed}"
    )


def _recorded(completion: Completion) -> TaskResult:
    assert completion.result is not None, "only a completion with a result merges"
    return completion.result
