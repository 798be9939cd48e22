"""The `setu` command: `main` is every command (`dev`, `admin` and a client's
commands), `client_main` a client's commands alone (`python -m setu_cli`).

Each command module registers its commands on the CommandSet passed to its
`register` (command_set.py); this module calls them in the order `setu
--help` lists them, and hands the parsed arguments to session.run_command.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from setu_cli import admin, agents, apply, changes, dev, jobs, objects, state
from setu_cli.command_set import CommandSet
from setu_cli.options import EXIT_CODES_HELP, lazy_module, server_options
from setu_client.version import add_version_flag

if TYPE_CHECKING:
    from setu_cli import session as cli_session
else:
    # Imported when a command runs, not to build the parser.
    cli_session = lazy_module("setu_cli.session")

SETU_HELP = """setu: the command line. `setu dev` runs a local server with dev credentials;
`setu admin …` manages workspaces, API keys and agents on a running server;
`setu connections|pipelines|run|jobs …` are a client's commands (the setu_cli
package, which needs only the SDK)."""

CLIENT_HELP = """setu: a client's commands for a running Setu server: connections,
pipelines, runs and jobs. (The `setu` of a server install also has `dev`
and `admin`.)"""

# In the order `setu --help` lists their commands; changes and state add
# leaves to the nouns objects made.
CLIENT_MODULES = (objects, changes, state, jobs, apply, agents)


def add_client_commands(sub: Any) -> CommandSet:
    """Registers the client's commands (connections, pipelines, run, jobs,
    apply, delete, export, agents) on `setu`'s subparsers."""
    commands = CommandSet(sub, server_options())
    register_client_commands(commands)
    return commands


def register_client_commands(commands: CommandSet) -> None:
    for module in CLIENT_MODULES:
        module.register(commands)


def _parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="setu",
        description=description,
        parents=[server_options()],
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version_flag(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    """`setu`: dev, admin and the client's commands."""
    parser = _parser(SETU_HELP)
    commands = CommandSet(parser.add_subparsers(dest="command", required=True), server_options())
    for module in (dev, admin):
        module.register(commands)
    register_client_commands(commands)
    # What follows `dev` is the server's to parse (setu_cli/dev.py); every
    # other command is parsed whole here, as parse_args would.
    args, rest = parser.parse_known_args(argv)
    if args.command == "dev":
        sys.exit(dev.run(rest, parser.error))
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    sys.exit(cli_session.run_command(args))


def client_main(argv: list[str] | None = None) -> None:
    """A client's commands alone: connections, pipelines, runs and jobs."""
    parser = _parser(CLIENT_HELP)
    add_client_commands(parser.add_subparsers(dest="command", required=True))
    sys.exit(cli_session.run_command(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
