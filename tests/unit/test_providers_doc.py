"""docs/providers.md's map of the providers' subpackages names every module
they have, so the page a new provider's author reads first does not fall
behind the code."""

from __future__ import annotations

import re

from tests.servers import ROOT

PROVIDERS = ROOT / "setu_engine" / "providers"


def _mapped() -> dict[str, set[str]]:
    """Each subpackage of the page's text block and the modules it names."""
    page = (ROOT / "docs" / "providers.md").read_text()
    block = page.split("```text\nsetu_engine/providers/\n", 1)[1].split("```", 1)[0]
    mapped: dict[str, set[str]] = {}
    current = ""
    for line in block.splitlines():
        if match := re.match(r"  (\w+)/", line):
            current = match.group(1)
        if current:
            mapped.setdefault(current, set()).update(re.findall(r"\b(\w+\.py)\b", line))
    return mapped


def test_the_providers_page_names_every_module_of_every_provider() -> None:
    mapped = _mapped()
    packages = {p.parent.name for p in PROVIDERS.glob("*/__init__.py")}
    assert packages == set(mapped), "a subpackage missing from the page, or one gone"
    missing = {
        package: sorted({p.name for p in (PROVIDERS / package).glob("*.py")} - mapped[package])
        for package in packages
    }
    assert not any(missing.values()), missing
    gone = {
        package: sorted(names - {p.name for p in (PROVIDERS / package).glob("*.py")})
        for package, names in mapped.items()
    }
    assert not any(gone.values()), gone
