"""docs/architecture.md describes the house as it is: every module listed, none invented."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def _modules() -> set[str]:
    found = set()
    for path in (ROOT / "src" / "grid").rglob("*.py"):
        parts = path.relative_to(ROOT / "src").with_suffix("").parts
        if "proto_gen" in parts:
            continue
        found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _listed() -> set[str]:
    tables = DOC.read_text().split("<!-- modules -->", 1)[1]
    return set(re.findall(r"^\| `(grid[a-z0-9_.]*)` \|", tables, flags=re.M))


def test_every_module_is_listed_in_docs_architecture() -> None:
    missing = sorted(_modules() - _listed())
    assert not missing, f"add these modules to docs/architecture.md: {missing}"


def test_docs_architecture_lists_no_module_that_does_not_exist() -> None:
    gone = sorted(_listed() - _modules())
    assert not gone, f"docs/architecture.md lists modules that do not exist: {gone}"
