"""A migrate task whose run ended while the task waited (cancelled, or
failed by another of its tasks) does nothing: it neither opens the staging
blob nor writes the run's books, and completes SKIPPED. The Migrate handler
runs against a RunBook written for the test (the seam it reads its run
through); no server, no database."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import pytest

from setu_agent.cloud.migrate import Migrate, MigrateSettings
from setu_agent.runtime.task import TaskContext
from setu_engine.kinds import WriteMode
from setu_engine.staged.blob import BlobSettings
from setu_engine.support.secrets import SecretStore
from setu_tasks.results import MigrateMode
from setu_tasks.specs import ConnectionSpec, LeasedTask, MigrateSpec

SOURCE = ConnectionSpec("c-src", "sqlite", {"path": "/nonexistent/source.db"})
DESTINATION = ConnectionSpec("c-dst", "sqlite", {"path": "/nonexistent/destination.db"})


class EndedRunBook:
    """Answers spec() with an ended run; any other call is recorded, and fails."""

    def __init__(self, *, cancel_requested: bool) -> None:
        self.cancel_requested = cancel_requested
        self.calls: list[str] = []

    async def spec(self) -> MigrateSpec:
        self.calls.append("spec")
        return MigrateSpec(
            job_id="job-1",
            workspace_id="ws-1",
            pipeline_id="pl-1",
            source=SOURCE,
            destination=DESTINATION,
            streams=[],
            spec={},
            write_mode=WriteMode.APPEND,
            phase=None,
            dry_run=False,
            load_on_agent=False,
            rows_extracted=0,
            blob_prefix="ws/ws-1/pl/pl-1/run/job-1/",
            blob=BlobSettings("local", "/nonexistent/blob"),
            cancel_requested=self.cancel_requested,
            ended=True,
        )

    def __getattr__(self, name: str) -> Callable[..., Awaitable[NoReturn]]:
        async def call(*args: Any, **kwargs: Any) -> NoReturn:
            self.calls.append(name)
            raise AssertionError(f"an ended run's books were written: {name}")

        return call


@pytest.mark.parametrize("cancel_requested", [False, True], ids=["failed", "cancelled"])
async def test_a_migrate_of_a_run_that_already_ended_is_skipped_untouched(
    cancel_requested: bool,
) -> None:
    book = EndedRunBook(cancel_requested=cancel_requested)
    opened: list[BlobSettings] = []

    def blobs(settings: BlobSettings) -> Any:
        opened.append(settings)
        raise AssertionError("an ended run's staging blob was opened")

    migrate = Migrate(
        books=lambda task: book,  # type: ignore[arg-type,return-value]
        blobs=blobs,
        secrets=SecretStore.from_file(None, {}, isolated=True),
        settings=MigrateSettings(),
    )
    task = LeasedTask("task-1", "job-1", "migrate", 1, 3, "token-1")
    result = await migrate(TaskContext(task))
    assert result.mode is MigrateMode.SKIPPED
    assert result.reason
    assert book.calls == ["spec"] and opened == []
