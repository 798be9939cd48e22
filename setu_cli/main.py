"""setu: a client's commands for a running Setu server: connections,
pipelines, runs and jobs. (The `setu` of a server install also has `dev`
and `admin`.)"""

from __future__ import annotations

import argparse
import sys

from setu_cli.commands import add_client_commands
from setu_cli.session import EXIT_CODES_HELP, run_command, server_options


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
