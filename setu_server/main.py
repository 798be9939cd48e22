"""setu-server: the control plane process."""

from __future__ import annotations

import argparse
import asyncio
import sys

from setu_client import logs
from setu_client.version import add_version_flag
from setu_server.config import Settings
from setu_server.server import serve_until_signalled


def main(argv: list[str] | None = None) -> None:
    args_list = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="setu-server", description=__doc__)
    add_version_flag(parser)
    Settings.add_arguments(parser)
    # Given by setu_server/processes.py to each of the processes it starts.
    parser.add_argument("--process-index", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(args_list)
    settings = Settings.from_args(args)
    logs.configure(settings.log_level, settings.log_format)
    if args.process_index is None and settings.process_count > 1:
        from setu_server.processes import supervise

        raise SystemExit(asyncio.run(supervise(settings, args_list)))
    asyncio.run(serve_until_signalled(settings, args.process_index))


if __name__ == "__main__":
    main()
