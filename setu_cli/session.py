"""What every `setu` command shares: the exit codes, the one error type, the
server options (one parser for an API key's commands and an admin token's),
and the session that runs a parsed command and turns its failures into one
line on stderr and an exit code.

A command module registers its handlers on a CommandSet (command_set.py);
main.py builds the parser and hands the parsed arguments to `run_command`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

# The exit codes and the server options are the parser's (options.py, which
# `setu --help` imports without this module); they are named here too, for
# the command modules that reach them through their session.
from setu_cli.options import (  # noqa: F401
    EXIT_CANCELLED,
    EXIT_CODES_HELP,
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_STILL_RUNNING,
    EXIT_SUCCEEDED,
    Credential,
    server_options,
)
from setu_client import RetryPolicy, SetuClient, SetuError
from setu_client.admin import AdminClient
from setu_client.diagnose import cause_of
from setu_client.replicas import Replicas
from setu_client.tls import TlsConfig, tls_defaults, tls_from_options

# A person at a prompt waits less than a program: 5 s of retries where the
# SDK's short calls default to 15 s. The waiters (jobs wait, watch, run
# --wait) reach the server with a short call first, so a wrong address
# fails in 5 s too; once it answered they ride a restart as the SDK does,
# for its long-poll budget (5 min), saying when the server went away and
# when it is back (ServerWatch). Ctrl-C is the other way out.
CLI_RETRY = RetryPolicy(initial_seconds=0.1, max_seconds=2.0, budget_seconds=5.0)


class CliError(Exception):
    """A command that cannot go on (bad input, a refused call): `error:
    <message>` on stderr, and `exit_code` (2 unless given)."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Session:
    """One run of a command: what the interrupt handler needs to know."""

    watching: str = ""


# What a leaf command runs, given the client its credential opened.
ClientHandler = Callable[[SetuClient, argparse.Namespace, Session], Awaitable[int]]
AdminHandler = Callable[[AdminClient, argparse.Namespace, Session], Awaitable[int]]


class ServerWatch:
    """A waiter's two lines on stderr: its server went away, and is back
    (setu_client.replicas.OutageListener). Another replica is offered only
    when the target names more than one."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._many = Replicas(target).many

    def went_away(self, error: SetuError) -> None:
        elsewhere = ", or another replica" if self._many else ""
        _say(f"server {self._target} went away (restarting?); waiting for it{elsewhere}…")

    def back(self) -> None:
        _say(f"server {self._target} is back")


def _say(line: str) -> None:
    # On its own line, apart from a progress line being redrawn on a terminal.
    print(f"\n{line}" if sys.stderr.isatty() else line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- options

DEFAULT_SERVER = "127.0.0.1:50051"


def server_source(args: argparse.Namespace) -> str:
    """Where the address a command dials came from, for an error that says
    it could not reach it: the flag, SETU_SERVER, or the default."""
    if hasattr(args, "server"):
        return "--server"
    return "SETU_SERVER" if os.environ.get("SETU_SERVER") else "the default"


def fill_defaults(args: argparse.Namespace, credential: Credential) -> None:
    """The options no level of the command line gave, from the environment."""
    args.server_source = server_source(args)
    defaults: dict[str, Any] = {"server": os.environ.get("SETU_SERVER") or DEFAULT_SERVER}
    if credential == "api_key":
        defaults |= {"api_key": os.environ.get("SETU_API_KEY", ""), **tls_defaults()}
        defaults["json"] = False
    else:
        defaults |= {"admin_token": "", **tls_defaults()}
    for name, value in defaults.items():
        if not hasattr(args, name):
            setattr(args, name, value)
    if credential == "admin_token":
        # An empty --admin-token falls back to the environment too.
        args.admin_token = args.admin_token or os.environ.get("SETU_ADMIN_TOKEN", "")


# ---------------------------------------------------------------- errors


# Causes (setu_client/diagnose.py) that mean nothing answered at the
# address: the server may simply not be running, or the address is wrong.
_NOTHING_THERE = ("connection refused", "DNS resolution", "network unreachable", "no route")
_HOW_TO_CHECK = (
    "is the server running? `setu dev` starts one; `setu dev env` prints the settings "
    "(SETU_SERVER, SETU_API_KEY) of the last one it started"
)
_SOURCES = {
    "--server": "the address given by --server",
    "SETU_SERVER": "the address in SETU_SERVER",
    "the default": "the default address; --server or SETU_SERVER names another",
}


def one_line_error(error: SetuError, server: str, tls: TlsConfig | None, source: str = "") -> str:
    """A failed call in one line: the cause when the server was not reached
    (setu_client/diagnose.py), with where the address came from (`source`)
    and how to check, else the server's own message."""
    cause = cause_of(error, tls=tls is not None)
    if cause is None:
        return error.message
    line = f"cannot reach {server}: {cause}"
    if source:
        line += f" ({_SOURCES.get(source, source)})"
    if cause.startswith(_NOTHING_THERE):
        line += f"; {_HOW_TO_CHECK}"
    return line


def file_error(exc: OSError | ValueError) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return f"cannot read {exc.filename}: {exc.strerror or exc}"
    return str(exc)


# ---------------------------------------------------------------- running


async def _with_client(args: argparse.Namespace, session: Session) -> int:
    if not args.api_key:
        raise CliError("an API key is required (--api-key or SETU_API_KEY)")
    if not (args.api_key.isascii() and args.api_key.isprintable()) or " " in args.api_key:
        # grpc would refuse it as a header with a cryptic batch error.
        raise CliError("the API key has characters a key never has (a stray space or newline?)")
    if getattr(args, "limit", 1) < 1:
        raise CliError("--limit must be at least 1")
    handler: ClientHandler = args.handler
    async with SetuClient(
        args.server,
        args.api_key,
        tls=args.tls_config or False,
        retry=CLI_RETRY,
        outage=ServerWatch(args.server),
    ) as client:
        return await handler(client, args, session)


async def _with_admin(args: argparse.Namespace, session: Session) -> int:
    handler: AdminHandler = args.handler
    # One attempt per call and no deadline, as an operator's command always had.
    async with AdminClient(
        args.server, args.admin_token, tls=args.tls_config or False, call_timeout=None
    ) as admin:
        try:
            return await handler(admin, args, session)
        except SetuError as error:
            # An admin refusal names its status: `error: ALREADY_EXISTS: …`.
            if cause_of(error, tls=args.tls_config is not None) is not None:
                raise CliError(
                    one_line_error(error, args.server, args.tls_config, args.server_source)
                ) from None
            raise CliError(f"{error.code.name}: {error.message}") from None


def run_command(args: argparse.Namespace) -> int:
    """Runs the parsed command (its `handler`, signed with its `credential`);
    returns the process's exit code."""
    credential: Credential = getattr(args, "credential", "api_key")
    fill_defaults(args, credential)
    session = Session()
    if credential == "admin_token" and not args.admin_token:
        print(
            "error: an admin token is required (--admin-token or SETU_ADMIN_TOKEN)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        args.tls_config = tls_from_options(args)
    except (OSError, ValueError) as exc:
        print(f"error: TLS: {file_error(exc)}", file=sys.stderr)
        return EXIT_ERROR
    try:
        run = _with_admin if credential == "admin_token" else _with_client
        return asyncio.run(run(args, session))
    except KeyboardInterrupt:
        if session.watching:
            print(
                f"\nstopped waiting; job {session.watching} carries on.\n"
                f"to cancel it: setu jobs cancel {session.watching}",
                file=sys.stderr,
            )
        return EXIT_INTERRUPTED
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except SetuError as exc:
        line = one_line_error(exc, args.server, args.tls_config, args.server_source)
        print(f"error: {line}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:
        # A person reads this: one line that names the failure. A bug's
        # traceback is one variable away.
        if os.environ.get("SETU_DEBUG"):
            raise
        what = (str(exc).splitlines() or [""])[0][:200]
        hint = "(SETU_DEBUG=1 shows the traceback)"
        print(f"error: unexpected {type(exc).__name__}: {what} {hint}", file=sys.stderr)
        return EXIT_ERROR
