"""Pipelines: source -> operators -> destination, run by hand or on a schedule.

The spec is validated by the engine's own parser, so a pipeline accepted
here is one the runtimes can run; it is stored as given.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from croniter import CroniterError, croniter

from setu_client.clock import Clock
from setu_client.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from setu_engine.errors import SpecError, SyncError
from setu_engine.operators.chain import parse_spec
from setu_engine.planning.incremental import check_provider, parse_sync
from setu_server.models import JobState, Pipeline, WriteMode
from setu_server.service import paging
from setu_server.service.connections import (
    DEFAULT_PAGE_SIZE,
    ConnectionDraft,
    ConnectionService,
    check_name,
    merge_fields,
)
from setu_server.service.lifecycle import JobLifecycle
from setu_server.service.pipeline_catalog import check_against_catalog
from setu_server.store import connections, pipelines, stream_state
from setu_server.store.db import Connection, Database, transaction
from setu_server.store.stream_state import StreamState

SpecValidator = Callable[[dict[str, Any]], object]
# With validate_only: a connection not made yet, by the end it stands in for.
End = Literal["source", "destination"]
NewConnections = Mapping[End, ConnectionDraft]

CRON_FIELDS = 5


@dataclass(frozen=True)
class PipelineDraft:
    """A pipeline's mutable fields, as a caller asks for them."""

    name: str
    # None only in a request that leaves it out: then it is INVALID_ARGUMENT.
    source_connection_id: UUID | None
    destination_connection_id: UUID | None
    streams: list[str] = field(default_factory=list)
    spec: dict[str, Any] = field(default_factory=dict)
    write_mode: WriteMode = WriteMode.APPEND
    schedule: str = ""
    paused: bool = False


MUTABLE_FIELDS = tuple(f.name for f in dataclasses.fields(PipelineDraft))


def next_tick(schedule: str, after: datetime) -> datetime:
    """The first time `schedule` fires strictly after `after` (UTC).
    INVALID_ARGUMENT for anything but a five-field cron expression that fires."""
    fields = schedule.split()
    if len(fields) != CRON_FIELDS:
        raise InvalidArgument(
            f"schedule: expected a five-field cron expression (minute hour day month weekday), "
            f"got {len(fields)} field(s) in {schedule!r}"
        )
    try:
        tick: datetime = croniter(schedule, after).get_next(datetime)
    except CroniterError as exc:
        raise InvalidArgument(f"schedule: {schedule!r} is not valid: {exc}") from None
    return tick


def check_streams(streams: Sequence[str]) -> None:
    seen: set[str] = set()
    for i, stream in enumerate(streams):
        if not stream.strip():
            raise InvalidArgument(f"streams[{i}]: must not be empty")
        if stream in seen:
            raise InvalidArgument(f"streams[{i}]: {stream!r} is listed twice")
        seen.add(stream)


class PipelineService:
    def __init__(
        self,
        pool: Database,
        clock: Clock,
        lifecycle: JobLifecycle,
        spec_validator: SpecValidator = parse_spec,
        connections: ConnectionService | None = None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._lifecycle = lifecycle
        self._parse_spec = spec_validator
        self._connections = connections or ConnectionService(pool, clock)

    async def create(
        self,
        workspace_id: UUID,
        draft: PipelineDraft,
        *,
        validate_only: bool = False,
        new_connections: NewConnections | None = None,
    ) -> Pipeline:
        """The new pipeline. With `validate_only` the same checks and the same
        insert run in a transaction that is rolled back; `new_connections`
        (only then) are made first in it, so the pipeline is judged against
        connections an apply has yet to create."""
        next_run_at = self._check(draft)
        async with transaction(self._pool, commit=not validate_only) as conn:
            draft = await self._stand_ins(conn, workspace_id, draft, validate_only, new_connections)
            await _hold_connections(conn, workspace_id, draft)
            await _check_catalog(conn, draft)
            try:
                return await pipelines.insert_pipeline(
                    conn,
                    id=uuid.uuid4(),
                    workspace_id=workspace_id,
                    next_run_at=next_run_at,
                    now=self._clock.sql_now(),
                    **dataclasses.asdict(draft),
                )
            except AlreadyExists:
                raise _name_taken(draft.name) from None

    async def get(self, workspace_id: UUID, pipeline_id: UUID) -> Pipeline:
        found = await pipelines.get_pipeline(self._pool, pipeline_id, workspace_id)
        if found is None:
            raise _not_found(pipeline_id)
        return found

    async def list_pipelines(
        self, workspace_id: UUID, page_size: int, page_token: str
    ) -> tuple[list[Pipeline], str]:
        query = repr(("pipelines", workspace_id))
        position = paging.decode(page_token, query)
        after = str(position["name"]) if position else None
        size = page_size or DEFAULT_PAGE_SIZE
        found = await pipelines.list_pipelines(
            self._pool, workspace_id, after=after, limit=size + 1
        )
        page, more = found[:size], len(found) > size
        token = paging.encode({"name": page[-1].name}, query) if more else ""
        return page, token

    async def update(
        self,
        workspace_id: UUID,
        pipeline_id: UUID,
        changes: PipelineDraft,
        paths: Sequence[str],
        *,
        validate_only: bool = False,
        new_connections: NewConnections | None = None,
    ) -> Pipeline:
        """Replaces the fields named in `paths` (all mutable ones when empty)
        and validates the pipeline that results as a whole. The next run is
        recomputed only when the schedule or pause changed, so an edit of
        anything else never moves or skips a tick. `validate_only` and
        `new_connections` as for `create`."""
        async with transaction(self._pool, commit=not validate_only) as conn:
            current = await pipelines.lock_pipeline(conn, pipeline_id, workspace_id)
            if current is None:
                raise _not_found(pipeline_id)
            changes = await self._stand_ins(
                conn, workspace_id, changes, validate_only, new_connections
            )
            draft = merge_fields(_draft_of(current), changes, paths, MUTABLE_FIELDS)
            next_run_at = self._check(draft)
            if (draft.schedule, draft.paused) == (current.schedule, current.paused):
                next_run_at = current.next_run_at
            await _hold_connections(conn, workspace_id, draft)
            # Only what the catalog can judge, and only when it changed: a
            # pipeline whose source moved on can still be paused or renamed.
            if _what_the_catalog_judges(draft) != _what_the_catalog_judges(_draft_of(current)):
                await _check_catalog(conn, draft)
            wanted = dataclasses.replace(
                current, next_run_at=next_run_at, **dataclasses.asdict(draft)
            )
            try:
                updated = await pipelines.update_pipeline(conn, wanted, self._clock.sql_now())
            except AlreadyExists:
                raise _name_taken(draft.name) from None
        assert updated is not None, "the row is locked"
        return updated

    async def state(self, workspace_id: UUID, pipeline_id: UUID) -> list[StreamState]:
        """The saved cursor of each incremental stream that has one."""
        await self.get(workspace_id, pipeline_id)
        return await stream_state.pipeline_state(self._pool, pipeline_id, workspace_id)

    async def reset_state(
        self, workspace_id: UUID, pipeline_id: UUID, stream: str | None
    ) -> list[str]:
        """Forgets the saved cursor of `stream` (all when None): the next run
        reads it in full. Returns the streams reset."""
        if stream is not None and not stream.strip():
            raise InvalidArgument("stream: must not be blank (leave it out to reset every stream)")
        await self.get(workspace_id, pipeline_id)
        reset = await stream_state.reset(self._pool, pipeline_id, workspace_id, stream)
        if stream is not None and not reset:
            raise NotFound(f"pipeline {pipeline_id} has no saved state for stream {stream!r}")
        return reset

    async def delete(self, workspace_id: UUID, pipeline_id: UUID) -> None:
        """Refused while a run is pending or running. Runs waiting in READY
        are cancelled with it (a run cannot start without its pipeline);
        ended runs stay, unlinked."""
        async with transaction(self._pool) as conn:
            pipeline = await pipelines.lock_pipeline(conn, pipeline_id, workspace_id)
            if pipeline is None:
                raise _not_found(pipeline_id)
            # Locked and cancelled before the check: a StartJob that commits
            # meanwhile leaves its run PENDING, which the check then refuses on.
            why = f"cancelled: its pipeline {pipeline.name} was deleted"
            cancelled = await self._lifecycle.transition_many(
                await pipelines.ready_pipeline_runs(conn, pipeline_id),
                JobState.CANCELLED,
                f"Cancelled: its pipeline {pipeline.name} was deleted before the run started",
                db=conn,
                error_message=why,
            )
            run = await pipelines.active_pipeline_run(conn, pipeline_id)
            if run is not None:
                raise FailedPrecondition(
                    f"pipeline {pipeline_id} has an active run {run}; cancel it first"
                )
            await pipelines.delete_pipeline(conn, pipeline_id, workspace_id)
        self._lifecycle.published(cancelled)

    async def _stand_ins(
        self,
        conn: Connection,
        workspace_id: UUID,
        draft: PipelineDraft,
        validate_only: bool,
        new_connections: NewConnections | None,
    ) -> PipelineDraft:
        """`draft` naming the connections made for it in this (rolled-back)
        transaction; one made once when it is both ends."""
        if not new_connections:
            return draft
        if not validate_only:
            end = sorted(new_connections)[0]
            raise InvalidArgument(f"new_{end}_connection: only with validate_only")
        made: dict[str, tuple[ConnectionDraft, UUID]] = {}
        ids: dict[str, UUID] = {}
        for end, wanted in sorted(new_connections.items()):
            field = f"new_{end}_connection"
            first = made.get(wanted.name)
            if first is None:
                try:
                    stand_in = await self._connections.insert(conn, workspace_id, wanted)
                except InvalidArgument as exc:  # named as the request names it
                    raise InvalidArgument(_within(field, exc.message)) from None
                first = made[wanted.name] = (wanted, stand_in.id)
            elif first[0] != wanted:
                # One name is one connection: the real apply could make only one.
                raise InvalidArgument(
                    f"{field}.name: {wanted.name!r} also names the other end's new "
                    "connection, with other fields; one name is one connection"
                )
            ids[f"{end}_connection_id"] = first[1]
        return dataclasses.replace(draft, **ids)  # type: ignore[arg-type]  # UUID fields

    def _check(self, draft: PipelineDraft) -> datetime | None:
        """Validates everything but the connections; returns the next run."""
        check_name(draft.name)
        check_streams(draft.streams)
        try:
            self._parse_spec(draft.spec)
        except SpecError as exc:
            raise InvalidArgument(str(exc)) from None
        check_sync(draft)
        if not draft.schedule:
            return None
        # Checked even when paused, so that unpausing cannot meet a bad schedule.
        tick = next_tick(draft.schedule, self._clock.now())
        return None if draft.paused else tick


def check_sync(draft: PipelineDraft) -> None:
    """spec.sync's structure, and no merge or overwrite over an incremental
    stream: a cursor never sees a delete, so merge would drop every row not
    re-read, and overwrite over a cursor would keep only the delta (a file
    read by object is read whole, so it may overwrite)."""
    try:
        rules = parse_sync(draft.spec)
    except SyncError as exc:
        raise InvalidArgument(str(exc)) from None
    if rules and draft.write_mode == WriteMode.MERGE:
        stream = sorted(rules)[0]
        raise InvalidArgument(
            f"spec.sync.{stream}: write_mode merge needs a full sync (an incremental read "
            f"does not see deletes); use upsert or append, or sync the stream in full"
        )
    by_cursor = sorted(name for name, rule in rules.items() if rule.cursor)
    if by_cursor and draft.write_mode == WriteMode.OVERWRITE:
        stream = by_cursor[0]
        raise InvalidArgument(
            f"spec.sync.{stream}: write_mode overwrite needs a full sync (it would replace "
            f"the table with the rows of one delta); use upsert or append"
        )


def _within(field: str, message: str) -> str:
    """A stand-in connection's refusal under the request's field for it:
    "config: …" reads "new_source_connection.config: …"."""
    head = message.split(":", 1)[0]
    if head and " " not in head:
        return f"{field}.{message}"
    return f"{field}: {message}"


async def _hold_connections(conn: Connection, workspace_id: UUID, draft: PipelineDraft) -> None:
    """Both connections exist in the workspace, and stay until the transaction ends."""
    ends = {"source": draft.source_connection_id, "destination": draft.destination_connection_id}
    for end, connection_id in ends.items():
        if connection_id is None:
            raise InvalidArgument(f"{end}_connection_id: required")
        if not await connections.hold_connection(conn, connection_id, workspace_id):
            raise NotFound(f"{end} connection {connection_id} not found")
    assert draft.source_connection_id is not None, "checked above"
    source = await connections.get_connection(conn, draft.source_connection_id, workspace_id)
    if source is not None:
        _check_cursors(draft, source.provider)


def _check_cursors(draft: PipelineDraft, provider: str) -> None:
    """A file stream is incremental by object (no cursor); any other stream
    by its cursor column (setu_engine/planning/incremental.py `check_provider`)."""
    try:
        check_provider(parse_sync(draft.spec), provider)
    except SyncError as exc:
        raise InvalidArgument(str(exc)) from None


async def _check_catalog(conn: Connection, draft: PipelineDraft) -> None:
    assert draft.source_connection_id is not None, "held above"
    await check_against_catalog(
        conn, draft.source_connection_id, draft.streams, draft.spec, draft.write_mode
    )


def _what_the_catalog_judges(draft: PipelineDraft) -> tuple[object, ...]:
    return (draft.source_connection_id, draft.streams, draft.spec, draft.write_mode)


def _draft_of(p: Pipeline) -> PipelineDraft:
    return PipelineDraft(
        name=p.name,
        source_connection_id=p.source_connection_id,
        destination_connection_id=p.destination_connection_id,
        streams=p.streams,
        spec=p.spec,
        write_mode=p.write_mode,
        schedule=p.schedule,
        paused=p.paused,
    )


def _not_found(pipeline_id: UUID) -> NotFound:
    return NotFound(f"pipeline {pipeline_id} not found")


def _name_taken(name: str) -> AlreadyExists:
    return AlreadyExists(f"a pipeline named {name!r} already exists in this workspace")
