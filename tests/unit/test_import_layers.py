"""The import layers of the tree, read from the source (no module is run).

Every module of the first-party packages (`setu_*`) is parsed with `ast` and
every import it makes is counted: at module level, inside functions, and
under `if TYPE_CHECKING:` (an annotation is a dependency too: a module that
names a type of a higher floor knows that floor). Four rules:

- no import cycle among setu_engine's modules;
- inside setu_engine, a module imports only its own floor and the floors
  below it (FLOORS, ground first); a module at the top of the package, not
  in any folder, is the ground floor and imports nothing else of the engine;
- setu_engine imports nothing first-party outside itself: it is the ground
  of the whole tree (KNOWN_OUTSIDE lists the edges still to remove);
- each package imports only the first-party packages ALLOWED names (pinned
  as it holds today: setu_engine, setu_agent, setu_tasks and setu_client
  never import setu_server, setu_client imports no other package).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ENGINE = "setu_engine"

# setu_engine's floors, ground first: a module imports its own floor and the
# ones below. A module belongs to the floor of the longest name here that is
# it or a package above it; `setu_engine` itself (its top-level modules:
# errors, kinds, capabilities) is the ground floor.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("setu_engine",),
    ("setu_engine.support",),
    ("setu_engine.values",),
    ("setu_engine.filters",),
    ("setu_engine.operators",),
    ("setu_engine.planning",),
    ("setu_engine.staged",),
    ("setu_engine.providers",),
    ("setu_engine.movement",),
)

# Imports of setu_engine that leave it, still to remove: (module, imported).
KNOWN_OUTSIDE: frozenset[tuple[str, str]] = frozenset(
    {
        # strict_json's MalformedResult is an InvalidArgument of the SDK, so a
        # malformed plan answers INVALID_ARGUMENT through the one error table.
        ("setu_engine.values.strict_json", "setu_client.errors"),
    }
)

# The first-party packages each package may import (a package new to the
# tree must be added here, with what it may import).
ALLOWED: Mapping[str, frozenset[str]] = {
    "setu_client": frozenset(),
    "setu_engine": frozenset(),
    "setu_tasks": frozenset({"setu_client", "setu_engine"}),
    "setu_agent": frozenset({"setu_client", "setu_engine", "setu_tasks"}),
    # setu_server: only for `setu dev`, imported when it runs.
    "setu_cli": frozenset({"setu_client", "setu_server"}),
    "setu_server": frozenset({"setu_agent", "setu_client", "setu_engine", "setu_tasks"}),
}

SKIPPED_PARTS = {"_proto", "__pycache__"}


@dataclass(frozen=True)
class Import:
    module: str
    imported: str
    line: int


# -- reading the tree


def packages(root: Path) -> list[str]:
    return sorted(
        p.name for p in root.glob("setu_*") if p.is_dir() and (p / "__init__.py").is_file()
    )


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        relative = path.relative_to(root)
        if SKIPPED_PARTS & set(relative.parts):
            continue
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported_names(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool
) -> Iterator[tuple[str, str]]:
    """(module imported, name taken from it or "") for one import statement."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, ""
    else:
        base = node.module or ""
        if node.level:
            here = module.split(".") if is_package else module.split(".")[:-1]
            above = here[: len(here) - (node.level - 1)]
            base = ".".join(above + ([base] if base else []))
        for alias in node.names:
            yield base, alias.name


def read_imports(root: Path) -> dict[str, list[Import]]:
    """Every first-party module's imports of first-party modules."""
    files: dict[str, Path] = {}
    for package in packages(root):
        files.update(module_files(root, package))
    graph: dict[str, list[Import]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for base, name in _imported_names(node, module, path.name == "__init__.py"):
                # `from a.b import c` imports the module a.b.c when there is one.
                target = f"{base}.{name}" if f"{base}.{name}" in files else base
                if target in files and target != module:
                    found.append(Import(module, target, node.lineno))
        graph[module] = found
    return graph


def package_of(module: str) -> str:
    return module.split(".")[0]


# -- the rules


def cycles(graph: Mapping[str, Sequence[Import]], package: str) -> list[list[str]]:
    """Each import cycle among the package's modules, as the path around it
    (its first module repeated at the end); one per strongly connected group."""
    inside = {
        m: sorted({i.imported for i in imports if package_of(i.imported) == package})
        for m, imports in graph.items()
        if package_of(m) == package
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(module: str) -> None:
        # Tarjan's strongly connected components.
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in inside[module]:
            if other not in index:
                connect(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(inside):
        if module not in index:
            connect(module)
    return [_path_around(group, inside) for group in groups]


def _path_around(group: list[str], inside: Mapping[str, Sequence[str]]) -> list[str]:
    """One cycle through the group's first module, by breadth-first search."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    queue = [start]
    while queue:
        module = queue.pop(0)
        for other in inside[module]:
            if other == start:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, start]
            if other in members and other not in came_from:
                came_from[other] = module
                queue.append(other)
    raise AssertionError(f"no cycle through {start}")  # a group always has one


def floor_of(module: str, floors: Sequence[Sequence[str]]) -> int:
    best, floor = "", 0
    for level, names in enumerate(floors):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, floor = name, level
    return floor


def upward(
    graph: Mapping[str, Sequence[Import]], package: str, floors: Sequence[Sequence[str]]
) -> list[str]:
    """Each import inside the package that reaches a higher floor."""
    found = []
    for module, imports in sorted(graph.items()):
        if package_of(module) != package:
            continue
        mine = floor_of(module, floors)
        for i in imports:
            if package_of(i.imported) == package and floor_of(i.imported, floors) > mine:
                theirs = floor_of(i.imported, floors)
                found.append(
                    f"{module}:{i.line} (floor {mine}: {floors[mine][0]}) imports "
                    f"{i.imported} (floor {theirs}: {floors[theirs][0]})"
                )
    return found


def leaving(
    graph: Mapping[str, Sequence[Import]], package: str, known: frozenset[tuple[str, str]]
) -> list[str]:
    """Each import of the package's modules of a first-party module outside it."""
    return [
        f"{module}:{i.line} imports {i.imported}"
        for module, imports in sorted(graph.items())
        if package_of(module) == package
        for i in imports
        if package_of(i.imported) != package and (module, i.imported) not in known
    ]


def forbidden(
    graph: Mapping[str, Sequence[Import]],
    allowed: Mapping[str, frozenset[str]],
    known: frozenset[tuple[str, str]] = frozenset(),
) -> list[str]:
    """Each import of one first-party package by another it may not import
    (but the `known` edges)."""
    found = []
    for module, imports in sorted(graph.items()):
        mine = package_of(module)
        if mine not in allowed:
            found.append(f"{mine}: a package the import rules do not name (add it to ALLOWED)")
            continue
        for i in imports:
            theirs = package_of(i.imported)
            if theirs != mine and theirs not in allowed[mine] and (module, i.imported) not in known:
                found.append(
                    f"{module}:{i.line} imports {i.imported} ({mine} may not import {theirs})"
                )
    return sorted(set(found))


# -- the tree as it is


@pytest.fixture(scope="module")
def graph() -> dict[str, list[Import]]:
    return read_imports(ROOT)


def test_the_engine_has_no_import_cycle(graph: dict[str, list[Import]]) -> None:
    found = cycles(graph, ENGINE)
    assert not found, "import cycles in setu_engine:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_engine_imports_only_down_its_floors(graph: dict[str, list[Import]]) -> None:
    found = upward(graph, ENGINE, FLOORS)
    assert not found, "imports up a floor (see FLOORS):\n" + "\n".join(found)


def test_the_engine_imports_nothing_first_party_outside_it(
    graph: dict[str, list[Import]],
) -> None:
    found = leaving(graph, ENGINE, KNOWN_OUTSIDE)
    assert not found, "setu_engine imports outside itself:\n" + "\n".join(found)


def test_the_known_exceptions_still_exist(graph: dict[str, list[Import]]) -> None:
    edges = {(m, i.imported) for m, imports in graph.items() for i in imports}
    gone = sorted(KNOWN_OUTSIDE - edges)
    assert not gone, f"remove from KNOWN_OUTSIDE, no longer imported: {gone}"


def test_packages_import_only_what_they_may(graph: dict[str, list[Import]]) -> None:
    found = forbidden(graph, ALLOWED, KNOWN_OUTSIDE)
    assert not found, "imports between packages that ALLOWED forbids:\n" + "\n".join(found)


def test_the_checks_see_the_whole_engine(graph: dict[str, list[Import]]) -> None:
    engine = {m for m in graph if package_of(m) == ENGINE}
    assert {"setu_engine.errors", "setu_engine.movement.transfer"} <= engine
    assert "setu_engine.providers.base" in engine
    # Imports inside functions and under TYPE_CHECKING are read too.
    transfer = {i.imported for i in graph["setu_engine.movement.transfer"]}
    assert "setu_engine.providers.base" in transfer
    for floor in FLOORS[1:]:
        assert any(floor_of(m, FLOORS) == FLOORS.index(floor) for m in engine), floor


# -- each rule can fail: a small tree of its own


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


TOY_FLOORS = (("setu_toy",), ("setu_toy.low",), ("setu_toy.high",))


@pytest.fixture()
def toy(tmp_path: Path) -> Path:
    return write_tree(
        tmp_path,
        {
            "setu_toy/__init__.py": "",
            "setu_toy/errors.py": "class ToyError(Exception): ...\n",
            "setu_toy/low/__init__.py": "",
            "setu_toy/low/a.py": "from setu_toy.errors import ToyError\n",
            "setu_toy/low/b.py": "from setu_toy.low import a\n",
            "setu_toy/high/__init__.py": "",
            "setu_toy/high/c.py": "from setu_toy.low.b import x\nfrom . import d\n",
            "setu_toy/high/d.py": "from ..low import a\n",
            "setu_base/__init__.py": "",
            "setu_base/lib.py": "",
        },
    )


def test_a_clean_tree_breaks_no_rule(toy: Path) -> None:
    graph = read_imports(toy)
    assert {i.imported for i in graph["setu_toy.high.c"]} == {
        "setu_toy.low.b",
        "setu_toy.high.d",
    }
    assert not cycles(graph, "setu_toy")
    assert not upward(graph, "setu_toy", TOY_FLOORS)
    assert not leaving(graph, "setu_toy", frozenset())
    allowed: dict[str, frozenset[str]] = {"setu_toy": frozenset(), "setu_base": frozenset()}
    assert not forbidden(graph, allowed)


def test_a_cycle_is_found_and_printed(toy: Path) -> None:
    # b imports a; a now imports b, inside a function.
    write_tree(toy, {"setu_toy/low/a.py": "def f():\n    from setu_toy.low import b\n"})
    assert cycles(read_imports(toy), "setu_toy") == [
        ["setu_toy.low.a", "setu_toy.low.b", "setu_toy.low.a"]
    ]


def test_an_upward_import_is_found(toy: Path) -> None:
    write_tree(
        toy,
        {
            "setu_toy/low/a.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from setu_toy.high.d import D\n"
            ),
            "setu_toy/errors.py": "import setu_toy.low.b\n",
        },
    )
    found = upward(read_imports(toy), "setu_toy", TOY_FLOORS)
    assert found == [
        "setu_toy.errors:1 (floor 0: setu_toy) imports setu_toy.low.b (floor 1: setu_toy.low)",
        "setu_toy.low.a:3 (floor 1: setu_toy.low) imports setu_toy.high.d (floor 2: setu_toy.high)",
    ]


def test_an_import_outside_the_package_is_found(toy: Path) -> None:
    write_tree(toy, {"setu_toy/high/d.py": "from setu_base import lib\n"})
    graph = read_imports(toy)
    assert leaving(graph, "setu_toy", frozenset()) == ["setu_toy.high.d:1 imports setu_base.lib"]
    assert not leaving(graph, "setu_toy", frozenset({("setu_toy.high.d", "setu_base.lib")}))


def test_a_forbidden_package_import_is_found(toy: Path) -> None:
    write_tree(toy, {"setu_base/lib.py": "from setu_toy.low.a import ToyError\n"})
    graph = read_imports(toy)
    allowed: dict[str, frozenset[str]] = {"setu_toy": frozenset(), "setu_base": frozenset()}
    assert forbidden(graph, allowed) == [
        "setu_base.lib:1 imports setu_toy.low.a (setu_base may not import setu_toy)"
    ]
    assert not forbidden(graph, {**allowed, "setu_base": frozenset({"setu_toy"})})
    assert forbidden(graph, {"setu_toy": frozenset()}) == [
        "setu_base: a package the import rules do not name (add it to ALLOWED)"
    ]
