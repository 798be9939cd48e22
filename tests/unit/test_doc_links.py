"""The README, docs/ and code comments reference only files in this repository.

Three checks over the tree as it is:
- every relative Markdown link in README.md and docs/ names a file or folder
  that exists (and, for a `#anchor` into a Markdown file, a heading there);
- every repository path named in a Markdown page or in a code comment
  (`# …`, docstrings, `// …` in .proto, `-- …` in .sql) exists;
- nothing cites the design notes that live outside the repository.

A path is a token like `dir/…/file.ext` with one of PATH_EXTENSIONS; a token
with a glob or a template (`queries/*.sql`, `ws/{ws}/…`) is not a path. It
may be written from the repository root, from the file's own folder, or
from any folder above it (`unit/test_doc_links.py` anywhere under tests/).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PATH_EXTENSIONS = ("py", "md", "sql", "proto", "toml", "yaml", "yml")
CODE_SUFFIXES = {".py", ".proto", ".sql"}
# Code folders besides the `setu_*` packages (found by name, so a new one is
# covered the day it appears).
CODE_FOLDERS = ("protos", "scripts", "tests")
SKIPPED_PARTS = {"_proto", "__pycache__", ".venv", ".git", "node_modules"}
# Loose files whose every line is checked for citations.
EXTRA_FILES = ("pyproject.toml", "Makefile")

# Written so that this file does not match itself.
CITATIONS = (
    re.compile(r"DESIGN\.md"),
    re.compile(r"STYLE\.md"),
    re.compile(r"DESIGN\s*§"),
    re.compile(r"\.\./shared"),
)

_EXT = "|".join(PATH_EXTENSIONS)
PATH_TOKEN = re.compile(
    rf"(?<![\w./{{}}*$-])((?:[\w.-]+/)+[\w.-]+\.(?:{_EXT}))(?![\w/{{}}*])",
)
MD_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")


# -- what to read


def markdown_files(root: Path) -> list[Path]:
    pages = [root / "README.md"] if (root / "README.md").exists() else []
    return pages + sorted((root / "docs").rglob("*.md"))


def code_files(root: Path) -> list[Path]:
    folders = [p for p in sorted(root.glob("setu_*")) if p.is_dir()]
    folders += [root / name for name in CODE_FOLDERS if (root / name).is_dir()]
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.suffix in CODE_SUFFIXES and not SKIPPED_PARTS & set(path.parts):
                found.append(path)
    return found


def comments(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a code file."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        yield from _python_comments(text)
        return
    marker = "//" if path.suffix == ".proto" else "--"
    in_block = False
    for number, line in enumerate(text.splitlines(), start=1):
        if path.suffix == ".proto" and (in_block or "/*" in line):
            in_block = "*/" not in line
            yield number, line
        elif marker in line:
            yield number, line[line.index(marker) :]


def _python_comments(text: str) -> Iterator[tuple[int, str]]:
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                value = body[0].value.value
                if isinstance(value, str):
                    for offset, line in enumerate(value.splitlines()):
                        yield body[0].lineno + offset, line


def markdown_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, text, inside a fenced code block) of a Markdown page."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            yield number, line, True
            continue
        yield number, line, fenced


# -- what a reference resolves to


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for _, line, fenced in markdown_lines(page):
        match = HEADING.match(line)
        if match and not fenced:
            base = slug(match[1])
            name, n = base, 0
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def path_exists(root: Path, source: Path, token: str) -> bool:
    """True when `token` names a file or folder from the root, from the
    source's folder, or from any folder between the two."""
    folder = source.parent
    candidates = [root / token]
    while True:
        candidates.append(folder / token)
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    return any(c.exists() for c in candidates)


def link_problem(root: Path, page: Path, target: str) -> str | None:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
        return None  # https:, mailto:: not a repository file
    where, _, anchor = target.partition("#")
    linked = (page.parent / where).resolve() if where else page
    if not linked.exists():
        return f"links to {target}, which does not exist"
    if anchor and linked.suffix == ".md" and anchor.lower() not in anchors(linked):
        return f"links to {target}: {linked.name} has no heading #{anchor}"
    return None


# -- the checks


def link_problems(root: Path) -> list[str]:
    problems = []
    for page in markdown_files(root):
        for number, line, fenced in markdown_lines(page):
            if fenced:
                continue
            for target in MD_LINK.findall(line):
                problem = link_problem(root, page, target)
                if problem:
                    problems.append(f"{page.relative_to(root)}:{number}: {problem}")
    return problems


def _missing_paths(root: Path, source: Path, lines: Iterator[tuple[int, str]]) -> list[str]:
    problems = []
    for number, line in lines:
        for token in PATH_TOKEN.findall(line):
            if not path_exists(root, source, token):
                problems.append(f"{source.relative_to(root)}:{number}: names {token}, not found")
    return problems


def path_problems(root: Path) -> list[str]:
    problems = []
    for page in markdown_files(root):
        lines = ((n, line) for n, line, _ in markdown_lines(page))
        problems += _missing_paths(root, page, lines)
    for path in code_files(root):
        problems += _missing_paths(root, path, comments(path))
    return problems


def citation_problems(root: Path) -> list[str]:
    files = markdown_files(root) + code_files(root)
    files += [root / name for name in EXTRA_FILES if (root / name).exists()]
    problems = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for pattern in CITATIONS:
                if pattern.search(line):
                    problems.append(
                        f"{path.relative_to(root)}:{number}: cites {pattern.pattern!r}, "
                        "which is not in this repository; point at docs/ instead"
                    )
    return problems


# -- the tree as it is


def test_markdown_links_point_at_files_that_exist() -> None:
    assert link_problems(ROOT) == []


def test_paths_named_in_docs_and_comments_exist() -> None:
    assert path_problems(ROOT) == []


def test_nothing_cites_notes_outside_the_repository() -> None:
    assert citation_problems(ROOT) == []


def test_the_checks_see_the_files_they_should() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in markdown_files(ROOT) + code_files(ROOT)}
    assert {"README.md", "docs/README.md", "tests/unit/test_doc_links.py"} <= names
    assert any(n.startswith("protos/") and n.endswith(".proto") for n in names)
    assert any(n.startswith("setu_server/store/queries/") for n in names)
    assert not any("/_proto/" in n for n in names), "generated code is not checked"


# -- the checks catch what they should (a small repository in tmp_path)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "setu_demo" / "store" / "queries").mkdir(parents=True)
    (tmp_path / "setu_demo" / "store" / "queries" / "jobs.sql").write_text("-- name: x\n")
    (tmp_path / "docs" / "flows.md").write_text("# Flows\n\n## Direct mode\n")
    (tmp_path / "README.md").write_text("[flows](docs/flows.md#direct-mode)\n")
    (tmp_path / "setu_demo" / "mod.py").write_text(
        '"""See docs/flows.md and store/queries/jobs.sql."""\n'
        "# Staged under ws/{ws}/run/{run}/part.sql; queries/*.sql; https://x.org/a/b.py\n"
    )
    return tmp_path


def test_a_clean_tree_has_no_problems(tree: Path) -> None:
    assert link_problems(tree) == []
    assert path_problems(tree) == []
    assert citation_problems(tree) == []


def test_a_broken_link_or_anchor_is_found(tree: Path) -> None:
    (tree / "docs" / "README.md").write_text(
        "[gone](gone.md) [bad anchor](flows.md#nowhere) [web](https://example.org/x.md)\n"
        "```\n[in code](not-a-link.md)\n```\n"
    )
    assert link_problems(tree) == [
        "docs/README.md:1: links to gone.md, which does not exist",
        "docs/README.md:1: links to flows.md#nowhere: flows.md has no heading #nowhere",
    ]


def test_a_comment_naming_a_missing_file_is_found(tree: Path) -> None:
    (tree / "setu_demo" / "gone.py").write_text(
        "x = 1  # see docs/moved.md\n"
        "def f() -> None:\n"
        '    """As setu_demo/store/queries/tasks.sql does."""\n'
    )
    (tree / "setu_demo" / "store" / "queries" / "runs.sql").write_text(
        "-- The lease (setu_demo/store/lease.py).\nSELECT 1;\n"
    )
    assert sorted(path_problems(tree)) == [
        "setu_demo/gone.py:1: names docs/moved.md, not found",
        "setu_demo/gone.py:3: names setu_demo/store/queries/tasks.sql, not found",
        "setu_demo/store/queries/runs.sql:1: names setu_demo/store/lease.py, not found",
    ]


def test_a_citation_of_outside_notes_is_found(tree: Path) -> None:
    outside = "DESIGN" + " §4"
    (tree / "setu_demo" / "cited.py").write_text(f"CAP = 60  # the cap ({outside})\n")
    (tree / "docs" / "old.md").write_text("See `" + ".." + "/shared/" + "STYLE" + ".md`.\n")
    found = citation_problems(tree)
    assert [p.split(": cites")[0] for p in found] == [
        "docs/old.md:1",  # two citations on one line
        "docs/old.md:1",
        "setu_demo/cited.py:1",
    ]
