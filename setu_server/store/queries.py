"""Named SQL queries, loaded once from the .sql files beside this module.

Each query starts with `-- name: <name>` followed by comment lines naming its
`$n` parameters. Store modules use `QUERIES.<name>`; nothing else holds SQL.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


class Queries:
    def __init__(self, sources: dict[str, str]) -> None:
        self._by_name: dict[str, str] = {}
        for filename, text in sorted(sources.items()):
            parts = _HEADER.split(text)
            for name, body in zip(parts[1::2], parts[2::2], strict=True):
                if name in self._by_name:
                    raise ValueError(f"query {name!r} defined twice (again in {filename})")
                self._by_name[name] = body.strip()

    def __getattr__(self, name: str) -> str:
        try:
            return self._by_name[name]
        except KeyError:
            raise AttributeError(f"no SQL query named {name!r}") from None

    def items(self) -> list[tuple[str, str]]:
        return sorted(self._by_name.items())


def _load() -> Queries:
    folder = resources.files(__package__) / "queries"
    return Queries({f.name: f.read_text() for f in folder.iterdir() if f.name.endswith(".sql")})


QUERIES = _load()
