"""The committed generated code is exactly what the protos generate."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "setu_client" / "_proto"


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_protos"] = module
    spec.loader.exec_module(module)
    return module


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_committed_code_matches_protos(tmp_path: Path) -> None:
    out = tmp_path / "_proto"
    _generator().generate(out)
    fresh, committed = _tree(out), _tree(COMMITTED)
    assert sorted(fresh) == sorted(committed), "generated file set differs: run `make proto`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"generated code is stale for {stale}: run `make proto`"


def test_every_rpc_documents_its_status_codes() -> None:
    for proto in sorted((ROOT / "protos").rglob("*.proto")):
        lines = proto.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("rpc "):
                comment = []
                j = i - 1
                while j >= 0 and lines[j].strip().startswith("//"):
                    comment.append(lines[j])
                    j -= 1
                assert "Codes:" in "\n".join(comment), f"{proto.name}: {line.strip()}"
