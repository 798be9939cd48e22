"""`setu dev`, which the server package brings (setu_server/dev.py).

Here it is only a name in `setu --help`: its options and subcommands are the
server's, imported when `dev` runs, so `setu --help` and every client
command start without the server's imports. An install without the server
package says so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

from setu_cli.command_set import CommandSet
from setu_cli.options import EXIT_ERROR

HELP = "run a local server with dev credentials"


def register(commands: CommandSet) -> None:
    """Adds `setu dev`; what follows it is parsed by the server's parser."""
    commands.parser("dev", help=HELP, add_help=False)


def run(argv: list[str], error: Callable[[str], NoReturn]) -> int:
    """Runs `setu dev ARGV…`; returns the exit code when it returns.
    `error` reports arguments dev does not take (the `setu` parser's)."""
    try:
        from setu_server import dev  # here: only `setu dev` pays for the server's imports
    except ModuleNotFoundError as exc:
        print(
            f"error: `setu dev` runs a Setu server and needs the server package "
            f"(setu_server and its dependencies), which this install lacks: {exc}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    dev.run(argv, error)
    return 0
