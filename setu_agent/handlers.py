"""The dispatch table: task kind -> handler, one engine for both placements.

An agent runs `extract`, `load`, `test`, `discover` and `preview`; the
cloud worker runs the last three for cloud connections (and `migrate`,
which lives in setu-server). Secret references are resolved here, by the
runtime that executes the stage, from its own store: a resolved secret is
never reported back. A kind missing from the table is failed by the runtime
with a clear, non-retryable error.
"""

from __future__ import annotations

import base64
import importlib
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol, cast

from setu_agent.runtime import Handler, TaskContext
from setu_agent.runtime.task import NonRetryable
from setu_client.errors import DeadlineExceeded, LeaseLost, Unavailable
from setu_engine.capabilities import capabilities_of
from setu_engine.errors import ConfigError, PermanentError, ProviderError, SpecError
from setu_engine.kinds import DEFAULT_BATCH_ROWS, WriteMode
from setu_engine.movement import dry_run, transfer
from setu_engine.movement.transfer import read_said
from setu_engine.operators.chain import PipelineSpec, parse_spec
from setu_engine.planning import incremental
from setu_engine.planning.plans import PlannedStream, SampleCheck
from setu_engine.providers import get_provider
from setu_engine.providers.base import Connector, CountsRows
from setu_engine.staged.blob import BlobSettings, BlobStore, open_blob
from setu_engine.staged.markers import LoadIdentity
from setu_engine.staged.resumable import DEFAULT_POLICY, ResumePolicy
from setu_engine.staged.s3 import S3Settings
from setu_engine.staged.staging import Manifest, StoredPart, read_manifest
from setu_engine.support.egress import Egress
from setu_engine.support.secrets import SecretStore, references
from setu_engine.values.special import JSON_NULL, Infinite, nonfinite_text, shortest_real
from setu_engine.values.types import Column, Row
from setu_tasks.codec.agents import stored_part_progress
from setu_tasks.results import (
    Artifact,
    DiscoverResult,
    ExtractResult,
    LoadResult,
    PreviewResult,
    TestResult,
)
from setu_tasks.specs import ConnectionSpec, LoadSpec, SpecSource

PREVIEW_LIMIT = 20

# Opens a connector: (provider, config with the policy applied, egress, files root).
Opener = Callable[[str, dict[str, Any], Egress | None, Path | None], Awaitable[Connector]]


class ConnectPolicy(Protocol):
    """What this runtime lets a connection reach. The cloud's keeps tenants
    off the server's own files, sockets, networks and credentials."""

    @property
    def egress(self) -> Egress | None:
        """Vets every address a connection opens a socket to."""
        ...

    @property
    def files_root(self) -> Path | None:
        """The folder every local file of the connection must stay inside."""
        ...

    def for_workspace(self, workspace_id: object) -> ConnectPolicy:
        """The policy as one workspace's connections meet it (its own files)."""
        ...

    def __call__(self, provider: str, config: dict[str, Any]) -> dict[str, Any]:
        """The resolved config to connect with, or ConfigError."""
        ...


# Stored parts a heartbeat carries at most (the latest ones).
STORED_SENT = 200


class ContextReporter:
    """Progress of an edge stage: into the next heartbeat, and a cancel check
    once per batch (the heartbeat answer sets the flag)."""

    def __init__(self, ctx: TaskContext) -> None:
        self._ctx = ctx
        self.rows_read = 0
        self.rows_written = 0
        # Each stream's [extracted, loaded] in this task, for the run's page.
        self._streams: dict[str, list[int]] = {}
        # What a load changed ahead of its rows: job events, via the result.
        self.notes: list[tuple[str, str]] = []
        # Parts stored whole this attempt (the latest STORED_SENT of them
        # ride every heartbeat: the server's books take a part again quietly).
        self._stored: list[dict[str, Any]] = []
        self._unsent = False
        # The source's own count of rows read, from where this attempt began.
        self._source: CountsRows | None = None
        self._read_before = 0

    def reads_from(self, source: Connector) -> None:
        """Counts what this attempt reads of `source`, where it counts."""
        if capabilities_of(source).counts_rows:
            counted = cast(CountsRows, source)
            self._source, self._read_before = counted, counted.rows_read

    @property
    def source_rows_read(self) -> int | None:
        return None if self._source is None else self._source.rows_read - self._read_before

    def stored(self, part: StoredPart) -> None:
        self._stored = [*self._stored, stored_part_progress(part)][-STORED_SENT:]
        self._ctx.report(stored_parts=self._stored)
        self._unsent = True

    def started(self, *, extract: bool) -> None:
        """The stage began: its first heartbeat goes now (the run's phase
        and counts show at once, not at the lease's cadence)."""
        if extract:
            self._ctx.report(rows_read=0)
        else:
            self._ctx.report(rows_written=0)
        self._ctx.beat_soon()

    def _moved(self, stream: str, index: int, rows: int) -> None:
        counts = self._streams.setdefault(stream, [0, 0])
        counts[index] += rows
        self._ctx.report(
            streams=[
                {"stream": name, "rows_extracted": e, "rows_loaded": w}
                for name, (e, w) in self._streams.items()
            ]
        )
        self._ctx.beat_soon()

    async def extracted(self, stream: str, rows: int) -> None:
        self.rows_read += rows
        self._ctx.report(rows_read=self.rows_read, stream=stream)
        self._moved(stream, 0, rows)
        where = f"extract of {stream}, {self.rows_read:,} rows read"
        if self.source_rows_read is not None:
            where += f"; {read_said(self.source_rows_read)}"
        self._ctx.checkpoint = where
        if self._unsent:
            # A part was stored: its record goes now (a heartbeat), not at
            # the next beat, so a stop right after it resumes after it.
            self._unsent = False
            try:
                await self._ctx.confirm_not_cancelled()
            except LeaseLost:
                raise
            except (Unavailable, DeadlineExceeded):
                pass  # the server is away: the next heartbeat carries the parts
        self._ctx.check_cancelled()

    async def loaded(self, stream: str, rows: int) -> None:
        self.rows_written += rows
        self._ctx.report(rows_written=self.rows_written, stream=stream)
        self._moved(stream, 1, rows)
        self._ctx.checkpoint = f"load of {stream}, {self.rows_written:,} rows written"
        self._ctx.check_cancelled()

    async def committing(self, stream: str) -> None:
        """The last word before a resumable load's apply commits
        (setu_engine/staged/resumable.py): the server is asked, not the
        latest heartbeat's answer."""
        self._ctx.report(rows_written=self.rows_written, stream=stream)
        await self._ctx.confirm_not_cancelled()

    async def note(self, stream: str, message: str) -> None:
        self.notes.append((stream, message))


def jsonable(value: Any) -> Any:
    """A neutral value as JSON for a preview: exact numbers as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return nonfinite_text(value)  # NaN and the infinities have no JSON number
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Infinite):
        return value.text
    if value is JSON_NULL:
        return None
    return value  # json: already dicts, lists and scalars


def preview_row(columns: tuple[Column, ...], row: Row) -> dict[str, Any]:
    """A row as a preview shows it, in JSON Lines' spellings
    (docs/data-types.md): a real with its float4's shortest digits (0.01);
    in a json column, JSON's null as null and SQL NULL as the key left out."""
    shown: dict[str, Any] = {}
    for column, value in zip(columns, row, strict=True):
        if value is None and column.type == "json":
            continue
        if column.type == "real" and isinstance(value, float):
            value = shortest_real(value)
        shown[column.name] = jsonable(value)
    return shown


class EngineHandlers:
    def __init__(
        self,
        secrets: SecretStore,
        specs: SpecSource | None = None,
        *,
        blob_override: BlobSettings | None = None,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        policy: ConnectPolicy | None = None,
        resume: ResumePolicy = DEFAULT_POLICY,
        sample: dry_run.SampleLimits = dry_run.DEFAULT_SAMPLE,
    ) -> None:
        self._secrets = secrets
        self._sample = sample
        self._resume = resume
        self._specs = specs
        self._blob_override = blob_override
        self._batch_rows = batch_rows
        self._policy = policy

    def table(self) -> dict[str, Handler]:
        handlers: dict[str, Handler] = {
            "test": self.test,
            "discover": self.discover,
            "preview": self.preview,
        }
        if self._specs is not None:
            handlers |= {"extract": self.extract, "load": self.load}
        return handlers

    # -- connection operations: the spec rides in the payload

    async def test(self, ctx: TaskContext) -> TestResult:
        try:
            connector = await self._connect(ctx, _connection(ctx))
        except (ConfigError, ProviderError) as exc:
            return TestResult(ok=False, message=str(exc))
        try:
            return TestResult(ok=True, message=await connector.test())
        except ProviderError as exc:
            return TestResult(ok=False, message=str(exc))
        finally:
            await connector.close()

    async def discover(self, ctx: TaskContext) -> DiscoverResult:
        asked = ctx.task.payload.get(dry_run.SAMPLE_PAYLOAD)
        async with self._connected(ctx, _connection(ctx)) as connector:
            streams = await connector.discover()
            samples = {} if asked is None else await self._sampled(connector, streams, asked)
        return DiscoverResult(tuple(streams), samples)

    async def _sampled(
        self, connector: Connector, streams: list[Any], asked: Any
    ) -> dict[str, SampleCheck]:
        """A dry run's discover on the source's agent: the first rows of each
        of the pipeline's streams through its chain (dry_run.sample), here,
        where the source is open. A spec or stream that does not fit is left
        to the server's plan, which says why."""
        try:
            wanted = dry_run.handed(asked)
            chosen = transfer.select_streams(streams, wanted["streams"])
            spec, mode = parse_spec(wanted["spec"]), WriteMode(wanted["write_mode"])
        except (ConfigError, SpecError, KeyError, TypeError, ValueError):
            return {}
        return await dry_run.sample(connector, spec, chosen, mode, self._sample)

    async def preview(self, ctx: TaskContext) -> PreviewResult:
        wanted = str(ctx.task.payload.get("stream", ""))
        limit = int(ctx.task.payload.get("limit") or PREVIEW_LIMIT)
        async with self._connected(ctx, _connection(ctx)) as connector:
            stream = transfer.select_streams(await connector.discover(), [wanted])[0]
            rows = await connector.preview(stream, limit)
        return PreviewResult(
            columns=tuple(stream.columns),
            rows=tuple(preview_row(stream.columns, row) for row in rows),
        )

    # -- run stages: the spec comes from the server, by task id

    async def extract(self, ctx: TaskContext) -> ExtractResult:
        assert self._specs is not None
        spec = await self._specs.extract_spec(ctx.task)
        reporter = ContextReporter(ctx)
        reporter.started(extract=True)
        async with (
            self._connected(ctx, spec.source) as source,
            self._blob(spec.blob) as blob,
        ):
            chosen = transfer.select_streams(await source.discover(), spec.streams)
            deltas = await incremental.windows(
                source, chosen, spec.spec, spec.cursors, spec.write_mode
            )
            streams = [d.stream for d in deltas]
            # What the run's line and page show as its total until the
            # extract ends (then its exact count): the cloud's estimate.
            total = sum(d.stream.row_estimate if d.rows is None else d.rows for d in deltas)
            if total > 0:
                ctx.report(rows_total=total)
                ctx.beat_soon()
            reporter.reads_from(source)
            manifest = await transfer.stage(
                source,
                streams,
                blob,
                spec.blob_prefix,
                reporter,
                self._batch_rows,
                earlier=spec.stored_parts,
            )
        # The timeline's lines of this extract, as a cloud extract says them:
        # each stream's window, where it resumed, and what this attempt read.
        windows = (incremental.window_note(s) for s in streams)
        notes = [*(n for n in windows if n is not None), *reporter.notes]
        read = reporter.source_rows_read
        if read is not None and manifest.streams:
            notes.append((manifest.streams[-1].name, f"Extract staged: {read_said(read)}"))
        return ExtractResult(Artifact.of(spec.blob_prefix, manifest), manifest.rows, tuple(notes))

    async def load(self, ctx: TaskContext) -> LoadResult:
        assert self._specs is not None
        spec = await self._specs.load_spec(ctx.task)
        try:
            chain = parse_spec(spec.spec)
        except SpecError as exc:
            raise NonRetryable(str(exc)) from exc
        handed = ctx.task.payload.get(dry_run.PLAN_PAYLOAD)
        if handed is not None:
            return await self._plan_load(ctx, spec, chain, dry_run.handed_plan(handed))
        reporter = ContextReporter(ctx)
        reporter.started(extract=False)
        async with self._blob(spec.blob) as blob:
            manifest = await read_manifest(blob, spec.blob_prefix)
            if spec.streams:  # one load task per stream
                manifest = Manifest([s for s in manifest.streams if s.name in spec.streams])
            async with self._connected(ctx, spec.destination) as destination:
                totals = await transfer.load(
                    destination,
                    manifest,
                    blob,
                    spec.blob_prefix,
                    chain,
                    spec.write_mode,
                    reporter,
                    identity=LoadIdentity(spec.job_id),
                    resume=self._resume,
                )
        return LoadResult(
            rows_loaded=sum(t.loaded for t in totals),
            rows_by_stream={t.stream: t.loaded for t in totals},
            changes_by_stream={t.stream: t.changes for t in totals if t.changes is not None},
            notes=tuple(reporter.notes),
            cursors_by_stream={t.stream: t.cursor for t in totals if t.cursor is not None},
        )

    async def _plan_load(
        self,
        ctx: TaskContext,
        spec: LoadSpec,
        chain: PipelineSpec,
        planned: tuple[PlannedStream, ...],
    ) -> LoadResult:
        """A dry run's load: the plan completed against this destination
        (opened, so tested, and inspected); nothing is written."""
        async with self._connected(ctx, spec.destination) as destination:
            inspected = await dry_run.inspect_destination(
                destination, planned, spec.write_mode, chain.schema_evolution
            )
        return LoadResult(rows_loaded=0, dry_run=True, planned=inspected)

    # -- plumbing

    async def _connect(self, ctx: TaskContext, connection: ConnectionSpec) -> Connector:
        workspace = ctx.task.payload.get("workspace_id")
        store = self._secrets.for_workspace(workspace) if workspace else self._secrets
        policy = self._policy.for_workspace(workspace) if self._policy else None
        return await open_connector(ctx, connection.provider, connection.config, store, policy)

    @asynccontextmanager
    async def _connected(
        self, ctx: TaskContext, connection: ConnectionSpec
    ) -> AsyncIterator[Connector]:
        try:
            connector = await self._connect(ctx, connection)
        except ConfigError as exc:
            raise NonRetryable(str(exc)) from exc
        try:
            yield connector
        finally:
            await connector.close()

    @asynccontextmanager
    async def _blob(self, settings: BlobSettings) -> AsyncIterator[BlobStore]:
        settings = self._blob_override or settings
        store = open_blob(
            settings, S3Settings(settings.endpoint_url, settings.region or "us-east-1")
        )
        try:
            yield store
        finally:
            await store.close()


async def open_connector(
    ctx: TaskContext,
    provider: str,
    config: dict[str, Any],
    secrets: SecretStore,
    policy: ConnectPolicy | None,
    opener: Opener | None = None,
) -> Connector:
    """A connector on a connection as this runtime may open it: secret
    references resolved (and remembered, to keep them out of reports), then
    the runtime's policy applied to what will really be opened. `opener`
    opens it (the cloud worker's goes through its connection cache)."""
    resolved = secrets.resolve(config, ctx.redact)
    open_ = opener or open_provider
    try:
        if policy is None:
            return await open_(provider, resolved, None, None)
        return await open_(provider, policy(provider, resolved), policy.egress, policy.files_root)
    except PermanentError as exc:
        if not exc.fields:
            raise
        raise PermanentError(f"{exc}; {_check_secrets(config, exc.fields)}") from exc


async def open_provider(
    provider: str, config: dict[str, Any], egress: Egress | None, root: Path | None
) -> Connector:
    """Opens a connector on a config the runtime's policy already applied."""
    return await get_provider(provider).connect(config, egress, root=root)


def _check_secrets(config: dict[str, Any], fields: tuple[str, ...]) -> str:
    """What to check of the credentials a provider refused: the secrets by
    name (never by value), the fields given in the config by field."""
    named = dict(references(config))
    parts = [
        f"the secret {named[field]} ({field}) in this runtime's secret store"
        if field in named
        else field
        for field in fields
        if field in named or field.removeprefix("config.") in config
    ]
    return f"check {' and '.join(parts) or 'the connection credentials'}"


def _connection(ctx: TaskContext) -> ConnectionSpec:
    try:
        return ConnectionSpec.from_payload(ctx.task.payload["connection"])
    except (KeyError, TypeError) as exc:
        raise NonRetryable("the task carries no connection to work on") from exc


def load_extra(spec: str) -> dict[str, Handler]:
    """Handlers from `package.module:NAME` (a dict of kind -> handler), for
    extensions and tests."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"--extra-handlers wants MODULE:NAME, got {spec!r}")
    table = getattr(importlib.import_module(module_name), attribute)
    if not isinstance(table, dict):
        raise SystemExit(f"{spec} is not a dict of task kind -> handler")
    return dict(table)
