"""`setu-server`'s console script, which imports the server package when it runs.

The package checks at import that the `server` extra is installed. An agent's
install lacks it, and a console script pointing into the package would end in
that check's traceback; from here it is one line and exit code 2, as
`setu dev` says it.
"""

from __future__ import annotations

import sys

from setu_cli.options import EXIT_ERROR


def main(argv: list[str] | None = None) -> None:
    try:
        from setu_server import main as server  # the server's imports, paid only here
    except ModuleNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_ERROR) from None
    server.main(argv)
