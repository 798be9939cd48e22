"""setu's client commands: connections, pipelines, runs and jobs, over the SDK.

Every command talks to a running server with an API key. Human output is
aligned tables and key: value blocks; `--json` prints one JSON document.
Expected failures (a refused call, a bad file, an unknown name) print
`error: <message>` and exit 2.

Rendering (tables, blocks, the progress line) lives in render.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from setu_cli.render import (
    ProgressDisplay,
    as_dict,
    connection_block,
    emit,
    enum_name,
    job_block,
    job_state,
    outputs_table,
    pipeline_block,
    table,
    when,
)
from setu_cli.session import (
    EXIT_CANCELLED,
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_STILL_RUNNING,
    EXIT_SUCCEEDED,
    ClientHandler,
    CliError,
    Session,
    server_options,
)
from setu_client import (
    Job,
    JobNotStarted,
    JobState,
    NotFound,
    Placement,
    SetuClient,
    WriteMode,
)
from setu_client.messages import Connection, Pipeline

T = TypeVar("T")


# ---------------------------------------------------------------- input


def read_documents(source: str) -> list[dict[str, Any]]:
    """The objects in a YAML or JSON file (by extension, else by content;
    "-" is stdin): one object or a list of them."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as exc:
        raise CliError(f"{source}: {exc.strerror or exc}") from exc
    import yaml  # here, not at the top: `setu run --wait` never reads YAML

    suffix = "" if source == "-" else Path(source).suffix.lower()
    is_json = suffix == ".json" or (suffix not in (".yaml", ".yml") and text.lstrip()[:1] in "{[")
    try:
        loaded = json.loads(text) if is_json else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise CliError(f"{source}: not valid {'JSON' if is_json else 'YAML'}: {exc}") from exc
    items = loaded if isinstance(loaded, list) else [loaded]
    if not items or not all(isinstance(i, dict) for i in items):
        raise CliError(f"{source}: expected an object or a list of objects")
    return items


def _fields(
    item: dict[str, Any], what: str, required: Sequence[str], optional: Sequence[str]
) -> None:
    unknown = sorted(set(item) - set(required) - set(optional))
    if unknown:
        raise CliError(
            f"{what}: unknown field(s) {', '.join(unknown)}; "
            f"it takes {', '.join([*required, *optional])}"
        )
    missing = [k for k in required if not item.get(k)]
    if missing:
        raise CliError(f"{what}: missing {', '.join(missing)}")


# ---------------------------------------------------------------- names


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


async def _by_name_or_id(
    ref: str, kind: str, get: Callable[[str], Awaitable[T]], every: AsyncIterator[Any]
) -> T:
    if _is_uuid(ref):
        return await get(ref)
    async for found in every:
        if found.name == ref:
            return found  # type: ignore[no-any-return]
    raise NotFound(f"no {kind} named {ref!r}")


async def connection_ref(client: SetuClient, ref: str) -> Connection:
    return await _by_name_or_id(ref, "connection", client.get_connection, client.list_connections())


async def pipeline_ref(client: SetuClient, ref: str) -> Pipeline:
    return await _by_name_or_id(ref, "pipeline", client.get_pipeline, client.list_pipelines())


async def _connection_names(client: SetuClient) -> dict[str, str]:
    return {c.id: c.name async for c in client.list_connections()}


# ---------------------------------------------------------------- connections


async def _create_each(
    args: argparse.Namespace,
    kind: str,
    create: Callable[[dict[str, Any], str], Awaitable[Connection | Pipeline]],
) -> int:
    """Creates the file's objects in order, reporting each, and stops at the
    first refusal; with --json the ones made so far are still printed."""
    items = read_documents(args.file)
    made: list[dict[str, Any]] = []
    try:
        for n, item in enumerate(items, 1):
            what = f"{args.file}: {kind} {item.get('name') or n}"
            try:
                answer = await create(item, what)
            except ValueError as exc:  # the SDK's checks of enum-like fields
                raise CliError(f"{what}: {exc}") from exc
            made.append(as_dict(answer))
            if not args.json:
                print(f"created {kind} {made[-1]['name']} ({made[-1]['id']})")
    finally:
        if args.json and made:
            print(json.dumps(made if len(items) > 1 else made[0], indent=2))
    return 0


async def connections_create(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    async def create(item: dict[str, Any], what: str) -> Connection:
        _fields(item, what, ("name", "provider"), ("config", "placement", "agent_id"))
        return await client.create_connection(
            item["name"],
            item["provider"],
            item.get("config") or {},
            item.get("placement") or "cloud",
            item.get("agent_id"),
        )

    return await _create_each(args, "connection", create)


async def connections_list(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    found = [c async for c in client.list_connections(provider=args.provider)]
    rows = [
        (
            c.name,
            c.provider,
            enum_name(Placement(c.placement)),
            c.id,
            when(c.created_at),
        )
        for c in found
    ]
    human = table(("NAME", "PROVIDER", "PLACEMENT", "ID", "CREATED"), rows)
    emit(args, {"connections": [as_dict(c) for c in found]}, human if rows else "no connections")
    return 0


async def connections_get(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    c = await connection_ref(client, args.name_or_id)
    emit(args, as_dict(c), connection_block(c))
    return 0


async def connections_delete(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    c = await connection_ref(client, args.name_or_id)
    await client.delete_connection(c.id)
    emit(args, {"deleted": c.id}, f"deleted connection {c.name} ({c.id})")
    return 0


# ---------------------------------------------------------------- pipelines

_PIPELINE_OPTIONAL = ("streams", "spec", "write_mode", "schedule", "paused")


async def pipelines_create(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    async def create(item: dict[str, Any], what: str) -> Pipeline:
        _fields(item, what, ("name", "source", "destination"), _PIPELINE_OPTIONAL)
        streams = item.get("streams") or []
        if not isinstance(streams, list) or not all(isinstance(s, str) for s in streams):
            raise CliError(f"{what}: streams must be a list of names")
        source = await connection_ref(client, str(item["source"]))
        destination = await connection_ref(client, str(item["destination"]))
        return await client.create_pipeline(
            item["name"],
            source.id,
            destination.id,
            streams=streams,
            spec=item.get("spec"),
            write_mode=item.get("write_mode") or "append",
            schedule=item.get("schedule") or "",
            paused=bool(item.get("paused", False)),
        )

    return await _create_each(args, "pipeline", create)


async def pipelines_list(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    found = [p async for p in client.list_pipelines()]
    names = await _connection_names(client) if found and not args.json else {}
    rows = [
        (
            p.name,
            names.get(p.source_connection_id, p.source_connection_id),
            names.get(p.destination_connection_id, p.destination_connection_id),
            enum_name(WriteMode(p.write_mode)),
            p.schedule or "-",
            "paused" if p.paused else "",
            p.id,
        )
        for p in found
    ]
    headers = ("NAME", "SOURCE", "DESTINATION", "MODE", "SCHEDULE", "PAUSED", "ID")
    human = table(headers, rows) if rows else "no pipelines"
    emit(args, {"pipelines": [as_dict(p) for p in found]}, human)
    return 0


async def pipelines_get(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    p = await pipeline_ref(client, args.name_or_id)
    names = {} if args.json else await _connection_names(client)
    emit(args, as_dict(p), pipeline_block(p, names))
    return 0


async def pipelines_delete(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    p = await pipeline_ref(client, args.name_or_id)
    await client.delete_pipeline(p.id)
    emit(args, {"deleted": p.id}, f"deleted pipeline {p.name} ({p.id})")
    return 0


# ---------------------------------------------------------------- runs and jobs

_EXIT_BY_STATE = {
    JobState.SUCCEEDED: EXIT_SUCCEEDED,
    JobState.FAILED: EXIT_FAILED,
    JobState.CANCELLED: EXIT_CANCELLED,
}


async def _report_end(client: SetuClient, job: Job, args: argparse.Namespace) -> int:
    """The job's final block and per-stream outputs; the exit code its state means."""
    outputs = await client.job_outputs(job.id)
    # A dry run moved nothing: its plan (in the block) is what it has to show.
    human = job_block(job) if job.plan else f"{job_block(job)}\n\n{outputs_table(outputs)}"
    emit(args, {"job": as_dict(job), "outputs": as_dict(outputs)}, human)
    return _EXIT_BY_STATE.get(job.state, EXIT_STILL_RUNNING)


async def _follow(
    client: SetuClient, job_id: str, args: argparse.Namespace, session: Session
) -> int:
    # With --json stdout carries the one document, so the display goes to stderr.
    out = sys.stderr if args.json else sys.stdout
    await client.get_job(job_id)  # reached (and known) before the watch rides outages
    display = ProgressDisplay(out, tty=out.isatty())
    session.watching = job_id
    last: Job | None = None
    try:
        async for job in client.watch_job(job_id):
            display.show(job)
            last = job
    finally:
        display.close()
    session.watching = ""
    if not args.json and not display.tty:
        print()  # set the summary apart from the progress lines
    return await _report_end(client, last or await client.get_job(job_id), args)


async def run(client: SetuClient, args: argparse.Namespace, session: Session) -> int:
    if args.wait and args.no_start:
        raise CliError("--wait would wait for ever on a job left READY; drop one of them")
    pipeline = await pipeline_ref(client, args.pipeline)
    job = await client.submit_run(
        pipeline.id,
        start=not args.no_start,
        dry_run=args.dry_run,
        idempotency_key=args.idempotency_key,
    )
    # A plan is worth seeing: a dry run waits for it, and exits as it ended.
    if not (args.wait or (args.dry_run and not args.no_start)):
        emit(args, as_dict(job), job.id)
        return 0
    if not args.json:
        print(f"job {job.id}  (pipeline {pipeline.name})", flush=True)
    return await _follow(client, job.id, args, session)


async def jobs_get(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    job = await client.get_job(args.id)
    emit(args, as_dict(job), job_block(job))
    return 0


async def jobs_start(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    job = await client.start_job(args.id)
    emit(args, as_dict(job), f"job {job.id} is {job_state(job)}")
    return 0


async def jobs_wait(client: SetuClient, args: argparse.Namespace, session: Session) -> int:
    await client.get_job(args.id)  # reached (and known) before the wait rides outages
    session.watching = args.id
    # On timeout _report_end shows the state the job is still in, and exits 4.
    with contextlib.suppress(TimeoutError):
        try:
            await client.wait_for_job(args.id, timeout=args.timeout)
        except JobNotStarted:
            raise CliError(
                f"job {args.id} is READY and would never end: start it with "
                f"`setu jobs start {args.id}`"
            ) from None
    session.watching = ""
    return await _report_end(client, await client.get_job(args.id), args)


async def jobs_watch(client: SetuClient, args: argparse.Namespace, session: Session) -> int:
    return await _follow(client, args.id, args, session)


async def jobs_cancel(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    job = await client.cancel_job(args.id, args.reason)
    if job.terminal:
        human = f"job {job.id} is {job_state(job)}"
    else:
        human = f"cancel requested: job {job.id} is {job_state(job)}"
    emit(args, as_dict(job), human)
    return 0


async def jobs_events(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    events = [e async for e in client.job_events(args.id)]
    rows = [
        (
            when(e.created_at),
            enum_name(e.level),
            e.stream or "-",
            e.message,
        )
        for e in events
    ]
    human = table(("TIME", "LEVEL", "STREAM", "MESSAGE"), rows) if rows else "no events"
    emit(args, {"events": [as_dict(e) for e in events]}, human)
    return 0


async def jobs_outputs(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    outputs = await client.job_outputs(args.id)
    t = outputs.totals
    totals = f"total: extracted {t.rows_extracted:,}, loaded {t.rows_loaded:,}"
    emit(args, as_dict(outputs), f"{outputs_table(outputs)}\n\n{totals}")
    return 0


async def jobs_list(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    pipeline_id = (await pipeline_ref(client, args.pipeline)).id if args.pipeline else ""
    states = [JobState[s.upper()] for s in args.state]
    found: list[Job] = []
    listing = client.list_jobs(
        states=states, pipeline_id=pipeline_id, page_size=min(args.limit, 500)
    )
    async for job in listing:
        found.append(job)
        if len(found) == args.limit:
            break  # asyncio.run closes the abandoned listing on the way out
    rows = [
        (
            j.id,
            job_state(j),
            enum_name(j.kind),
            enum_name(j.phase),
            f"{j.progress.rows_extracted:,}",
            f"{j.progress.rows_loaded:,}",
            when(j.created_at),
            when(j.finished_at),
        )
        for j in found
    ]
    headers = ("ID", "STATE", "KIND", "PHASE", "EXTRACTED", "LOADED", "CREATED", "FINISHED")
    emit(args, {"jobs": [as_dict(j) for j in found]}, table(headers, rows) if rows else "no jobs")
    return 0


# ---------------------------------------------------------------- parser and entry

_STATES = ("ready", "pending", "running", "succeeded", "failed", "cancelled")
_FILE_HELP = "YAML or JSON (by extension, else by content): one object or a list; - for stdin"


class _Commands:
    """Adds leaf commands that share the server options."""

    def __init__(self, group: Any, common: argparse.ArgumentParser) -> None:
        self._group = group
        self._common = common

    def add(self, name: str, handler: ClientHandler, help: str, *refs: str, **kw: Any) -> Any:
        parser = self._group.add_parser(
            name, help=help, description=help, parents=[self._common], **kw
        )
        parser.set_defaults(handler=handler)
        for ref in refs:
            parser.add_argument(ref.lower(), metavar=ref)
        return parser


def _object_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    from setu_cli.changes import add_change_commands  # here: changes.py imports this module

    by_noun: dict[str, _Commands] = {}
    for noun, create, listing, get, delete in (
        ("connections", connections_create, connections_list, connections_get, connections_delete),
        ("pipelines", pipelines_create, pipelines_list, pipelines_get, pipelines_delete),
    ):
        parser = sub.add_parser(
            noun, help=f"create, list, show, change and delete {noun}", parents=[common]
        )
        leaves = by_noun[noun] = _Commands(
            parser.add_subparsers(dest="action", required=True), common
        )
        leaves.add("create", create, f"create {noun} from a file").add_argument(
            "-f", "--file", required=True, metavar="FILE", help=_FILE_HELP
        )
        made = leaves.add("list", listing, f"list {noun}")
        if noun == "connections":
            made.add_argument("--provider", default="", help="only this provider's")
        leaves.add("get", get, f"show one of the {noun}", "NAME_OR_ID")
        leaves.add("delete", delete, f"delete one of the {noun}", "NAME_OR_ID")
    add_change_commands(by_noun)
    from setu_cli.state import add_state_commands  # here: state.py imports this module

    add_state_commands(by_noun)


def _job_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    codes = {"epilog": EXIT_CODES_HELP, "formatter_class": argparse.RawDescriptionHelpFormatter}
    runner = _Commands(sub, common).add(
        "run", run, "submit a run of a pipeline and print its job id", "PIPELINE", **codes
    )
    runner.add_argument("--wait", action="store_true", help="show progress until the run ends")
    runner.add_argument("--no-start", action="store_true", help="leave it READY (jobs start ID)")
    runner.add_argument(
        "--dry-run",
        action="store_true",
        help="plan the run against the source and destination, write nothing; print the plan "
        "and exit non-zero when the real run would fail",
    )
    runner.add_argument("--idempotency-key", default="", metavar="K", help="submit at most once")

    jobs = sub.add_parser("jobs", help="inspect, wait for and cancel jobs", parents=[common])
    leaves = _Commands(jobs.add_subparsers(dest="action", required=True), common)
    leaves.add("get", jobs_get, "show a job", "ID")
    leaves.add("start", jobs_start, "start a READY job", "ID")
    leaves.add("wait", jobs_wait, "wait until a job ends", "ID", **codes).add_argument(
        "--timeout", type=float, metavar="S", help="give up after S seconds (exit 4)"
    )
    leaves.add("watch", jobs_watch, "show a job's progress until it ends", "ID", **codes)
    leaves.add("cancel", jobs_cancel, "ask a job to stop (a no-op once ended)", "ID").add_argument(
        "--reason", default="", help="recorded in the job's events"
    )
    leaves.add("events", jobs_events, "a job's timeline", "ID")
    leaves.add("outputs", jobs_outputs, "a job's rows per stream", "ID")
    listing = leaves.add("list", jobs_list, "recent jobs, newest first")
    listing.add_argument(
        "--state",
        nargs="+",
        action="extend",
        default=[],
        choices=_STATES,
        metavar="S",
        help=f"only jobs in these states: {', '.join(_STATES)}",
    )
    listing.add_argument("--pipeline", default="", metavar="P", help="a pipeline name or id")
    listing.add_argument("--limit", type=int, default=20, metavar="N", help="at most N (20)")


def add_client_commands(sub: Any) -> None:
    """Registers connections, pipelines, run and jobs on `setu`'s subparsers."""
    common = server_options()
    _object_commands(sub, common)
    _job_commands(sub, common)
    from setu_cli.apply import add_apply_commands  # here: apply.py imports this module

    add_apply_commands(sub, common)
    from setu_cli.agents import add_agent_commands  # here: agents.py imports this module

    add_agent_commands(sub, common)
