"""An agent installs without the server's dependencies, read from the source
and pyproject.toml (no module is run, nothing is installed).

pyproject's base dependencies are what setu-agent, setu-worker and the `setu`
client need; setu-server's own are the `server` extra, and S3, Parquet and
the mysql and duckdb providers' drivers are extras of their own (`s3`,
`parquet`, `mysql`, `duckdb`). Two rules hold the split:

- the base lists no server-only distribution and none of an optional
  extra's, and the `server` extra brings every one of them;
- every module of the packages an agent-only install runs (AGENT_PACKAGES)
  imports, at module level, only the standard library, those packages, and
  distributions of the base. An import inside a function (made when the
  function runs) or under `if TYPE_CHECKING:` is not counted; one guarded by
  `try: ... except ImportError:` may name an extra's distribution, since the
  module then imports without it.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

import setu_server
from setu_engine.errors import ConfigError
from setu_engine.providers.files import parquet_options
from setu_engine.staged import s3

ROOT = Path(__file__).resolve().parents[2]

# What an agent host runs: setu-agent and setu-worker (setu_agent) over the
# engine, the task contract and the SDK, and the `setu` client (setu_cli,
# which imports setu_server only inside `setu dev`).
AGENT_PACKAGES = frozenset({"setu_agent", "setu_engine", "setu_tasks", "setu_client", "setu_cli"})
SERVER_PACKAGE = "setu_server"

# Distributions only setu-server needs: never in the base.
SERVER_ONLY = frozenset(
    {
        "pgserver",
        "aiohttp",
        "jinja2",
        "prometheus-client",
        "croniter",
        "grpcio-health-checking",
        "grpcio-reflection",
    }
)

# The distribution each third-party top-level module comes from. A module
# new to the tree is added here, with the distribution that ships it.
IMPORTED_FROM: Mapping[str, str] = {
    "grpc": "grpcio",
    "google": "protobuf",
    "asyncpg": "asyncpg",
    "tenacity": "tenacity",
    "yaml": "pyyaml",
    "zstandard": "zstandard",
    "orjson": "orjson",
    "psutil": "psutil",
    "aiobotocore": "aiobotocore",
    # botocore comes with aiobotocore (the s3 extra), never on its own.
    "botocore": "aiobotocore",
    "pyarrow": "pyarrow",
    "asyncmy": "asyncmy",
    "duckdb": "duckdb",
    "aiohttp": "aiohttp",
    "pgserver": "pgserver",
    "jinja2": "jinja2",
    "prometheus_client": "prometheus-client",
    "croniter": "croniter",
    "grpc_health": "grpcio-health-checking",
    "grpc_reflection": "grpcio-reflection",
}

# Modules of an extra of their own: they import its distributions at module
# level, and are themselves imported only where that extra's work is done
# (inside a function, after a check that names the extra when it is missing).
EXTRA_MODULES: Mapping[str, str] = {
    # pyarrow: imported where a Parquet file is read or written, after
    # parquet_options.require_pyarrow().
    "setu_engine.providers.files.parquet": "parquet",
    "setu_engine.providers.files.parquet_csv": "parquet",
    "setu_engine.providers.files.arrow_join": "parquet",
    # duckdb and pyarrow: the duckdb provider's modules, which its package
    # imports behind an ImportError guard that names the extra.
    "setu_engine.providers.duckdb.arrays": "duckdb",
    "setu_engine.providers.duckdb.catalog": "duckdb",
    "setu_engine.providers.duckdb.connector": "duckdb",
    "setu_engine.providers.duckdb.csv": "duckdb",
    "setu_engine.providers.duckdb.exposure": "duckdb",
    "setu_engine.providers.duckdb.failures": "duckdb",
    "setu_engine.providers.duckdb.stage": "duckdb",
    "setu_engine.providers.duckdb.types": "duckdb",
    "setu_engine.providers.duckdb.write": "duckdb",
    # asyncmy: the mysql provider's modules, behind the same guard in its package.
    "setu_engine.providers.mysql.connector": "mysql",
    "setu_engine.providers.mysql.failures": "mysql",
    "setu_engine.providers.mysql.infile": "mysql",
    "setu_engine.providers.mysql.types": "mysql",
    "setu_engine.providers.mysql.wire": "mysql",
    "setu_engine.providers.mysql.write": "mysql",
}

SKIPPED_PARTS = {"__pycache__"}


@dataclass(frozen=True)
class Dependencies:
    base: frozenset[str]
    # extra name -> its distributions (a `setu[...]` of the project itself
    # brings the named extras' distributions in).
    extras: Mapping[str, frozenset[str]]


@dataclass(frozen=True)
class ModuleImport:
    module: str
    imported: str  # dotted; `from a.b import c` counts as a.b.c
    line: int
    guarded: bool  # inside `try: ... except ImportError:`

    @property
    def top(self) -> str:
        """The imported module's first name: "grpc", "setu_server", "os"."""
        return self.imported.split(".")[0]


# -- reading pyproject.toml


def distribution(requirement: str) -> str:
    """`grpcio>=1.85,<2` -> `grpcio`; names normalized as PEP 503 does."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert match, f"not a requirement: {requirement!r}"
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def read_dependencies(pyproject: Path) -> Dependencies:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    name = distribution(project["name"])
    declared: dict[str, list[str]] = project.get("optional-dependencies", {})

    def expand(extra: str, seen: frozenset[str]) -> frozenset[str]:
        found: set[str] = set()
        for requirement in declared[extra]:
            if distribution(requirement) != name:
                found.add(distribution(requirement))
                continue
            inner = re.search(r"\[([^\]]*)\]", requirement)
            for other in inner.group(1).split(",") if inner else []:
                other = other.strip()
                if other and other not in seen:
                    found |= expand(other, seen | {other})
        return frozenset(found)

    return Dependencies(
        base=frozenset(distribution(r) for r in project["dependencies"]),
        extras={extra: expand(extra, frozenset({extra})) for extra in declared},
    )


# -- reading the tree


def module_files(root: Path, packages: frozenset[str]) -> dict[str, Path]:
    found = {}
    for package in sorted(packages):
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            if SKIPPED_PARTS & set(relative.parts):
                continue
            parts = list(relative.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = {"ImportError", "ModuleNotFoundError"}
    caught = handler.type
    if caught is None:
        return True
    if isinstance(caught, ast.Tuple):
        return any(isinstance(e, ast.Name) and e.id in names for e in caught.elts)
    return isinstance(caught, ast.Name) and caught.id in names


def _module_level(
    body: Sequence[ast.stmt], guarded: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """The import statements that run when the module is imported: its
    body, class bodies, both arms of an `if` (but TYPE_CHECKING's) and of a
    `try`; never a function's body."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, guarded
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level(node.body, guarded)
            yield from _module_level(node.orelse, guarded)
        elif isinstance(node, ast.Try):
            inner = guarded or any(_catches_import_error(h) for h in node.handlers)
            yield from _module_level(node.body, inner)
            for handler in node.handlers:
                yield from _module_level(handler.body, guarded)
            yield from _module_level(node.orelse, guarded)
            yield from _module_level(node.finalbody, guarded)
        elif isinstance(node, ast.With | ast.ClassDef):
            yield from _module_level(node.body, guarded)


def read_module_imports(root: Path, packages: frozenset[str]) -> list[ModuleImport]:
    found = []
    for module, path in module_files(root, packages).items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, guarded in _module_level(tree.body):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue  # relative: the module's own package
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module}.{alias.name}" for alias in node.names]
            )
            for name in names:
                found.append(ModuleImport(module, name, node.lineno, guarded))
    return found


# -- the rules


def base_faults(dependencies: Dependencies) -> list[str]:
    faults = []
    optional = {
        dist
        for extra, dists in dependencies.extras.items()
        if extra not in ("server", "dev")
        for dist in dists
    }
    for dist in sorted(dependencies.base & (SERVER_ONLY | optional)):
        faults.append(f"the base dependencies list {dist}, which an agent does not need")
    server = dependencies.extras.get("server", frozenset())
    for dist in sorted((SERVER_ONLY | optional) - server):
        faults.append(f"the server extra does not bring {dist}")
    return faults


def _allowed(found: ModuleImport, dist: str, dependencies: Dependencies) -> bool:
    """Whether a module may import this distribution at module level."""
    if dist in dependencies.base:
        return True
    if found.guarded:  # the module imports without it
        return dist in dependencies.base.union(*dependencies.extras.values())
    own = EXTRA_MODULES.get(found.module)
    return own is not None and dist in dependencies.extras.get(own, frozenset())


def import_faults(
    imports: Sequence[ModuleImport], dependencies: Dependencies, first_party: frozenset[str]
) -> list[str]:
    faults = []
    for found in imports:
        where = f"{found.module}:{found.line}"
        extra = EXTRA_MODULES.get(found.imported)
        if extra and not found.guarded and EXTRA_MODULES.get(found.module) != extra:
            faults.append(f"{where} imports {found.imported} (the {extra} extra's) at module level")
        elif found.top in sys.stdlib_module_names or found.top in first_party:
            continue
        elif found.top.startswith("setu_"):
            faults.append(f"{where} imports {found.top}, which an agent install does not run")
        elif (dist := IMPORTED_FROM.get(found.top)) is None:
            faults.append(f"{where} imports {found.top}: add its distribution to IMPORTED_FROM")
        elif not _allowed(found, dist, dependencies):
            faults.append(
                f"{where} imports {found.top} ({dist}, not a base dependency) at module level"
            )
    return list(dict.fromkeys(faults))  # `from x import a, b` is one fault


@pytest.fixture(scope="module")
def dependencies() -> Dependencies:
    return read_dependencies(ROOT / "pyproject.toml")


def test_the_base_dependencies_are_an_agents(dependencies: Dependencies) -> None:
    faults = base_faults(dependencies)
    assert not faults, "\n".join(faults)
    assert {"grpcio", "protobuf", "asyncpg"} <= dependencies.base


def test_an_agent_imports_only_the_base_at_module_level(dependencies: Dependencies) -> None:
    imports = read_module_imports(ROOT, AGENT_PACKAGES)
    faults = import_faults(imports, dependencies, AGENT_PACKAGES)
    assert not faults, "\n".join(faults)


def test_the_check_reads_every_package_and_the_s3_guard() -> None:
    packages = {p.name for p in ROOT.glob("setu_*") if (p / "__init__.py").is_file()}
    # A package new to the tree is either run by an agent or the server's.
    assert packages == AGENT_PACKAGES | {SERVER_PACKAGE}
    imports = read_module_imports(ROOT, AGENT_PACKAGES)
    # botocore's errors, guarded: an install without the s3 extra imports the blob store.
    assert any(i.module == "setu_engine.staged.s3" and i.top == "botocore" for i in imports)
    assert all(i.guarded for i in imports if i.top == "botocore")
    assert any(i.module == "setu_client._client" and i.top == "grpc" for i in imports)


# -- each rule can fail: a small tree and pyproject of their own

TOY_PYPROJECT = """
[project]
name = "toy"
dependencies = ["grpcio>=1", "asyncpg"]

[project.optional-dependencies]
s3 = ["aiobotocore>=2"]
server = ["toy[s3]", "aiohttp", "pgserver", "jinja2", "prometheus-client", "croniter",
          "grpcio-health-checking", "grpcio-reflection"]
dev = ["toy[server]", "pytest"]
"""

TOY_MODULE = """
from __future__ import annotations

import os
from typing import TYPE_CHECKING

import grpc

from setu_agent import other

if TYPE_CHECKING:
    import jinja2

try:
    import botocore
except ImportError:
    botocore = None


def later() -> None:
    import aiohttp
"""


def write_toy(root: Path, module: str = TOY_MODULE, pyproject: str = TOY_PYPROJECT) -> Path:
    (root / "setu_agent").mkdir(parents=True, exist_ok=True)
    (root / "setu_agent" / "__init__.py").write_text("", encoding="utf-8")
    (root / "setu_agent" / "runtime.py").write_text(module, encoding="utf-8")
    (root / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    return root


def toy_faults(root: Path) -> list[str]:
    dependencies = read_dependencies(root / "pyproject.toml")
    packages = frozenset({"setu_agent"})
    return base_faults(dependencies) + import_faults(
        read_module_imports(root, packages), dependencies, packages
    )


def test_a_lazy_guarded_or_type_only_import_is_no_fault(tmp_path: Path) -> None:
    root = write_toy(tmp_path)
    assert read_dependencies(root / "pyproject.toml").extras["dev"] >= {"aiohttp", "aiobotocore"}
    assert toy_faults(root) == []


def test_a_module_level_server_import_is_found(tmp_path: Path) -> None:
    root = write_toy(tmp_path, TOY_MODULE + "import aiohttp\nimport setu_server.main\n")
    assert toy_faults(root) == [
        "setu_agent.runtime:22 imports aiohttp (aiohttp, not a base dependency) at module level",
        "setu_agent.runtime:23 imports setu_server, which an agent install does not run",
    ]


def test_an_unknown_distribution_is_found(tmp_path: Path) -> None:
    root = write_toy(tmp_path, TOY_MODULE + "from numpy import array\n")
    assert toy_faults(root) == [
        "setu_agent.runtime:22 imports numpy: add its distribution to IMPORTED_FROM"
    ]


def test_a_server_dependency_in_the_base_is_found(tmp_path: Path) -> None:
    pyproject = TOY_PYPROJECT.replace('"asyncpg"]', '"asyncpg", "Jinja2>=3", "aiobotocore"]')
    pyproject = pyproject.replace('"jinja2", ', "")
    root = write_toy(tmp_path, pyproject=pyproject)
    assert toy_faults(root) == [
        "the base dependencies list aiobotocore, which an agent does not need",
        "the base dependencies list jinja2, which an agent does not need",
        "the server extra does not bring jinja2",
    ]


def test_a_module_level_import_of_an_extras_module_is_found(tmp_path: Path) -> None:
    module = TOY_MODULE + "from setu_engine.providers.files import parquet\n"
    root = write_toy(tmp_path, module)
    assert toy_faults(root) == [
        "setu_agent.runtime:22 imports setu_engine.providers.files.parquet"
        " (the parquet extra's) at module level"
    ]


# -- without an extra, the work that needs it says which


def test_an_s3_client_without_the_s3_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None in sys.modules makes the import fail, as on a host without aiobotocore.
    monkeypatch.setitem(sys.modules, "aiobotocore.session", None)
    with pytest.raises(ConfigError, match=r"^S3 needs the s3 extra.*pip install 'setu\[s3\]'$"):
        s3.s3_client(s3.S3Settings())


def test_a_parquet_file_without_the_parquet_extra_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = parquet_options.importlib.util.find_spec
    monkeypatch.setattr(
        parquet_options.importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "pyarrow" else found(name, *rest),
    )
    with pytest.raises(ConfigError, match=r"pip install 'setu\[parquet\]'$"):
        parquet_options.require_pyarrow()


def test_setu_server_without_the_server_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {IMPORTED_FROM[name] for name in setu_server.SERVER_EXTRA} <= SERVER_ONLY
    setu_server.check_server_extra()  # this virtualenv has it
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name in ("jinja2", "pgserver") else real(name, *rest),
    )
    with pytest.raises(
        ImportError, match=r"\(no pgserver, jinja2\): pip install 'setu\[server\]'$"
    ):
        setu_server.check_server_extra()


def test_setu_dev_without_the_server_extra_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # setu_server imported afresh, as on an agent's install: its check refuses.
    from setu_cli import dev

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "jinja2" else real(name, *rest),
    )
    monkeypatch.delitem(sys.modules, "setu_server")

    def refused(message: str) -> NoReturn:
        raise AssertionError(message)

    assert dev.run([], refused) == 2
    (said,) = capsys.readouterr().err.splitlines()
    assert said.startswith("error: `setu dev` runs a Setu server") and said.endswith(
        "(no jinja2): pip install 'setu[server]'"
    ), said


def test_setu_server_without_the_server_extra_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The console script's own module, with setu_server imported afresh as
    # on an agent's install: one line and exit code 2, no traceback.
    from setu_cli import serve

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "pgserver" else real(name, *rest),
    )
    monkeypatch.delitem(sys.modules, "setu_server")
    monkeypatch.delitem(sys.modules, "setu_server.main", raising=False)

    with pytest.raises(SystemExit) as ended:
        serve.main(["--version"])
    assert ended.value.code == 2
    (said,) = capsys.readouterr().err.splitlines()
    assert said.startswith("error: setu-server needs the server extra") and said.endswith(
        "(no pgserver): pip install 'setu[server]'"
    ), said


def test_the_setu_server_script_is_the_launcher_outside_the_server_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    scripts = project["scripts"]
    assert scripts["setu-server"] == "setu_cli.serve:main"
