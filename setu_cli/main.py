"""setu: a client's commands for a running Setu server: connections,
pipelines, runs and jobs. (The `setu` of a server install also has `dev`
and `admin`.)"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from setu_cli import agents, apply, changes, jobs, objects, state
from setu_cli.command_set import CommandSet
from setu_cli.session import EXIT_CODES_HELP, run_command, server_options

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="setu",
        description=__doc__,
        parents=[server_options()],
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_client_commands(parser.add_subparsers(dest="command", required=True))
    sys.exit(run_command(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
