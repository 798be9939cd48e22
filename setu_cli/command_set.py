"""The object every command module registers on: `register(commands:
CommandSet) -> None` adds that module's commands, and main.py calls each
module's register in the order `setu --help` lists them. A module reaches
another's commands only through it (`commands.leaves("pipelines")`), never
by importing the other module."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from setu_cli.session import ClientHandler


class Leaves:
    """The leaf commands of one level (`setu jobs get`, or `setu run` at the
    top), each with the server options and a handler that takes a SetuClient."""

    def __init__(self, group: Any, common: argparse.ArgumentParser) -> None:
        self._group = group
        self._common = common

    def add(
        self, name: str, handler: ClientHandler, help: str, *refs: str, **kw: Any
    ) -> argparse.ArgumentParser:
        """A leaf; each of `refs` ("NAME_OR_ID") is a positional argument."""
        parser: argparse.ArgumentParser = self._group.add_parser(
            name, help=help, description=help, parents=[self._common], **kw
        )
        parser.set_defaults(handler=handler)
        for ref in refs:
            parser.add_argument(ref.lower(), metavar=ref)
        return parser


class CommandSet:
    """`setu`'s subcommands: top-level leaves (`run`, `apply`), nouns with
    leaves of their own (`connections create`), and commands that bring
    their own options (`admin`, `dev`)."""

    def __init__(self, sub: Any, common: argparse.ArgumentParser) -> None:
        self._sub = sub
        self.common = common
        self._top = Leaves(sub, common)
        self._nouns: dict[str, Leaves] = {}

    def command(
        self, name: str, handler: ClientHandler, help: str, *refs: str, **kw: Any
    ) -> argparse.ArgumentParser:
        """A top-level leaf: `setu run PIPELINE`."""
        return self._top.add(name, handler, help, *refs, **kw)

    def noun(self, name: str, help: str) -> Leaves:
        """A top-level command whose leaves follow it: `setu jobs …`."""
        parser = self._sub.add_parser(name, help=help, parents=[self.common])
        leaves = Leaves(parser.add_subparsers(dest="action", required=True), self.common)
        self._nouns[name] = leaves
        return leaves

    def leaves(self, noun: str) -> Leaves:
        """A noun another module made, to add leaves to (`pipelines state`)."""
        return self._nouns[noun]

    def parser(self, name: str, **kw: Any) -> argparse.ArgumentParser:
        """A top-level command that sets up its own options and handlers."""
        made: argparse.ArgumentParser = self._sub.add_parser(name, **kw)
        return made
