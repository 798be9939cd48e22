"""setu-server: the control plane process."""

from __future__ import annotations

import argparse
import asyncio

from setu_client import logs
from setu_client.version import add_version_flag
from setu_server.config import Settings
from setu_server.server import serve_until_signalled


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="setu-server", description=__doc__)
    add_version_flag(parser)
    Settings.add_arguments(parser)
    settings = Settings.from_args(parser.parse_args(argv))
    logs.configure(settings.log_level, settings.log_format)
    asyncio.run(serve_until_signalled(settings))


if __name__ == "__main__":
    main()
