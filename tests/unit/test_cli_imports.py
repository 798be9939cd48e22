"""setu_cli's imports, read from the source with the import-layer test's
reader (imports inside functions count): no cycle among its modules, and the
server package reached from one place only, the `dev` command, so `setu
--help` and a client's commands never import it."""

from __future__ import annotations

import pytest

from tests.unit.test_import_layers import ROOT, Import, cycles, read_imports

CLI = "setu_cli"


@pytest.fixture(scope="module")
def graph() -> dict[str, list[Import]]:
    return read_imports(ROOT)


def test_setu_cli_has_no_import_cycle(graph: dict[str, list[Import]]) -> None:
    found = cycles(graph, CLI)
    assert not found, "import cycles in setu_cli:\n" + "\n".join(" -> ".join(c) for c in found)


def test_only_dev_and_the_server_launcher_import_the_server(
    graph: dict[str, list[Import]],
) -> None:
    # `setu dev` and setu-server's console script (setu_cli/serve.py), both
    # inside the function that runs them.
    found = sorted(
        f"{module}:{i.line} imports {i.imported}"
        for module, imports in graph.items()
        if module.split(".")[0] == CLI
        for i in imports
        if i.imported.split(".")[0] == "setu_server"
    )
    assert sorted({f.split(":")[0] for f in found}) == ["setu_cli.dev", "setu_cli.serve"], found
