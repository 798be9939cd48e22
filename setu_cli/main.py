"""setu: a client's commands for a running Setu server: connections,
pipelines, runs and jobs. (The `setu` of a server install also has `dev`
and `admin`.)"""

from __future__ import annotations

import argparse
import sys

from setu_cli.commands import (
    EXIT_CODES_HELP,
    add_client_commands,
    client_options,
    run_client_command,
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="setu",
        description=__doc__,
        parents=[client_options()],
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_client_commands(parser.add_subparsers(dest="command", required=True))
    sys.exit(run_client_command(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
