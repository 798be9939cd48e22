"""setu's `run` and `jobs` commands: submit a run, follow, wait for, cancel
and inspect jobs. Their exit codes say how the job ended (session.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import TYPE_CHECKING

import setu_client as sdk
from setu_cli.command_set import CommandSet
from setu_cli.inputs import pipeline_ref
from setu_cli.options import (
    EXIT_CANCELLED,
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_STILL_RUNNING,
    EXIT_SUCCEEDED,
    lazy_module,
)
from setu_cli.render import (
    ProgressDisplay,
    as_dict,
    emit,
    enum_name,
    job_block,
    job_runtimes,
    job_state,
    loaded_said,
    outputs_table,
    table,
    when,
)

if TYPE_CHECKING:
    from setu_cli import session as cli_session
    from setu_cli.session import Session
    from setu_client import Job, JobEvent, SetuClient
else:
    # Imported when a command runs, not to build the parser.
    cli_session = lazy_module("setu_cli.session")

# ---------------------------------------------------------------- runs and jobs

PAUSED_SAID = "pipeline is paused: schedules make no runs; this manual run goes ahead"

# By the state's name: JobState is the SDK's, imported when a command runs.
_EXIT_BY_STATE = {
    "SUCCEEDED": EXIT_SUCCEEDED,
    "FAILED": EXIT_FAILED,
    "CANCELLED": EXIT_CANCELLED,
}


async def _report_end(client: SetuClient, job: Job, args: argparse.Namespace) -> int:
    """The job's final block and per-stream outputs; the exit code its state means."""
    outputs = await client.job_outputs(job.id)
    # A dry run moved nothing: its plan (in the block) is what it has to show.
    human = job_block(job) if job.plan else f"{job_block(job)}\n\n{outputs_table(outputs)}"
    emit(args, {"job": as_dict(job), "outputs": as_dict(outputs)}, human)
    return _EXIT_BY_STATE.get(job.state.name, EXIT_STILL_RUNNING)


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
        raise cli_session.CliError(
            "--wait would wait for ever on a job left READY; drop one of them"
        )
    pipeline = await pipeline_ref(client, args.pipeline)
    if pipeline.paused:
        # stderr: `JOB=$(setu run P)` still reads the id alone.
        print(PAUSED_SAID, file=sys.stderr, flush=True)
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


async def jobs_rerun(client: SetuClient, args: argparse.Namespace, session: Session) -> int:
    try:
        job = await client.rerun_job(args.id, start=not args.no_start)
    except sdk.FailedPrecondition as error:
        raise cli_session.CliError(error.message) from None
    if not args.json:
        print(f"job {job.id}: a rerun of job {args.id}", file=sys.stderr, flush=True)
    with contextlib.suppress(sdk.NotFound):  # deleted since: its run says what became of it
        if (await client.get_pipeline(job.pipeline_id)).paused:
            print(PAUSED_SAID, file=sys.stderr, flush=True)  # a manual run, as `setu run` says
    if not args.wait:
        emit(args, as_dict(job), job.id)
        return 0
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
    timed_out = False
    try:
        await client.wait_for_job(args.id, timeout=args.timeout)
    except TimeoutError:
        timed_out = True
    except sdk.JobNotStarted:
        raise cli_session.CliError(
            f"job {args.id} is READY and would never end: start it with `setu jobs start {args.id}`"
        ) from None
    session.watching = ""
    job = await client.get_job(args.id)
    if timed_out and not job.terminal:
        # On stderr, so --json's stdout stays one document; exit 4 says it too.
        print(
            f"timed out after {args.timeout:g} s: job {job.id} is still {job_state(job)} "
            f"and carries on (`setu jobs wait {job.id}` waits again, "
            f"`setu jobs cancel {job.id}` stops it)",
            file=sys.stderr,
            flush=True,
        )
    # _report_end shows the state the job is in; still running, it exits 4.
    return await _report_end(client, job, args)


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


# How often `jobs events --follow` reads the timeline when the job's
# snapshot has not changed: an event need not bump the job's version.
FOLLOW_POLL_SECONDS = 2.0


def _event_line(e: JobEvent) -> str:
    return f"{when(e.created_at)}  {enum_name(e.level):<5}  {e.stream or '-'}  {e.message}"


async def _follow_events(client: SetuClient, args: argparse.Namespace, session: Session) -> int:
    """The timeline as it grows, until the job ends: each event once, read
    with ListJobEvents' cursor whenever WatchJob says the job changed (and
    every FOLLOW_POLL_SECONDS); exits as the job ended. --json prints one
    JSON object a line."""
    import asyncio  # here: the loop runs it, and building the parser needs none

    await client.get_job(args.id)  # reached (and known) before the watch rides outages
    session.watching = args.id
    changed = asyncio.Event()
    ended: list[Job] = []

    async def watch() -> None:
        async for snapshot in client.watch_job(args.id):
            if snapshot.terminal:
                ended.append(snapshot)
            changed.set()

    watcher = asyncio.create_task(watch())
    after = 0
    try:
        while True:
            # Seen before reading: the ending's events are committed with
            # the state that ended it, so this read has them all.
            over = bool(ended)
            async for event in client.job_events(args.id, after_sequence=after):
                after = event.sequence
                print(json.dumps(as_dict(event)) if args.json else _event_line(event), flush=True)
            if over:
                break
            if watcher.done():
                watcher.result()  # its error, if it failed
                continue  # it saw the end: one more read
            changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), FOLLOW_POLL_SECONDS)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    session.watching = ""
    return _EXIT_BY_STATE.get(ended[0].state.name, EXIT_STILL_RUNNING)


async def jobs_events(client: SetuClient, args: argparse.Namespace, session: Session) -> int:
    if args.follow:
        return await _follow_events(client, args, session)
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
    totals = f"total: extracted {t.rows_extracted:,}, {', '.join(loaded_said(t))}"
    emit(args, as_dict(outputs), f"{outputs_table(outputs)}\n\n{totals}")
    return 0


async def jobs_list(client: SetuClient, args: argparse.Namespace, _: Session) -> int:
    pipeline_id = (await pipeline_ref(client, args.pipeline)).id if args.pipeline else ""
    states = [sdk.JobState[s.upper()] for s in args.state]
    # Runs unless asked: a connection's tests, previews and discovers are
    # jobs too, and would crowd the runs out of the list.
    kinds = [] if "all" in args.kind else [sdk.JobKind[k.upper()] for k in args.kind or ["run"]]
    found: list[Job] = []
    listing = client.list_jobs(
        states=states, kinds=kinds, pipeline_id=pipeline_id, page_size=min(args.limit, 500)
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
            job_runtimes(j),
            f"{j.progress.rows_extracted:,}",
            f"{j.progress.rows_loaded:,}",
            when(j.created_at),
            when(j.finished_at),
        )
        for j in found
    ]
    headers = ("ID", "STATE", "KIND", "PHASE", "ON", "EXTRACTED", "LOADED", "CREATED", "FINISHED")
    emit(args, {"jobs": [as_dict(j) for j in found]}, table(headers, rows) if rows else "no jobs")
    return 0


_STATES = ("ready", "pending", "running", "succeeded", "failed", "cancelled")
_KINDS = ("run", "test", "discover", "preview", "all")


def register(commands: CommandSet) -> None:
    """Adds `run` and the `jobs` commands."""
    codes = {"epilog": EXIT_CODES_HELP, "formatter_class": argparse.RawDescriptionHelpFormatter}
    runner = commands.command(
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

    leaves = commands.noun("jobs", "inspect, wait for and cancel jobs")
    leaves.add("get", jobs_get, "show a job", "ID")
    rerun = leaves.add(
        "rerun",
        jobs_rerun,
        "a new run of the pipeline a run ran (a dry run again if it was one); print its id",
        "ID",
        **codes,
    )
    rerun.add_argument("--wait", action="store_true", help="show progress until the run ends")
    rerun.add_argument("--no-start", action="store_true", help="leave it READY (jobs start ID)")
    leaves.add("start", jobs_start, "start a READY job", "ID")
    leaves.add("wait", jobs_wait, "wait until a job ends", "ID", **codes).add_argument(
        "--timeout", type=float, metavar="S", help="give up after S seconds (exit 4)"
    )
    leaves.add("watch", jobs_watch, "show a job's progress until it ends", "ID", **codes)
    leaves.add("cancel", jobs_cancel, "ask a job to stop (a no-op once ended)", "ID").add_argument(
        "--reason", default="", help="recorded in the job's events"
    )
    leaves.add("events", jobs_events, "a job's timeline", "ID", **codes).add_argument(
        "--follow",
        action="store_true",
        help="print new events as they come until the job ends, and exit as it ended "
        "(with --json: one JSON object a line)",
    )
    leaves.add("outputs", jobs_outputs, "a job's rows per stream", "ID")
    listing = leaves.add("list", jobs_list, "recent runs (or other jobs: --kind), newest first")
    listing.add_argument(
        "--kind",
        nargs="+",
        action="extend",
        default=[],
        choices=_KINDS,
        metavar="K",
        help=f"only jobs of these kinds: {', '.join(_KINDS)} (default run; all: every kind)",
    )
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
