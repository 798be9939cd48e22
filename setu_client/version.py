"""`--version` for every entry point: `setu 0.1.0`, `setu-server 0.1.0`,
`setu-agent 0.1.0`, `setu-worker 0.1.0`, the version of the installed
distribution that brings these packages (importlib.metadata), read only
when the flag is given."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

# The distribution whose version every entry point reports; an install of
# another name (an agent-only package, say) is found by the module it holds.
DISTRIBUTION = "setu"
UNKNOWN = "0+unknown"  # run from a source tree that was never installed


def package_version() -> str:
    """The installed version of Setu's distribution."""
    # importlib.metadata here: every entry point's start pays for it otherwise.
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    for name in metadata.packages_distributions().get(__name__.split(".")[0], []):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return UNKNOWN


def version_line(prog: str) -> str:
    """What `PROG --version` prints: `PROG VERSION`."""
    return f"{prog} {package_version()}"


class _VersionAction(argparse.Action):
    """argparse's `version` action, with the version read when asked for
    rather than at every start."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> NoReturn:
        print(version_line(parser.prog.split()[0]), flush=True)
        parser.exit()


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """`--version`: prints `PROG VERSION` and exits 0."""
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
