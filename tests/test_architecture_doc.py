"""docs/architecture.md describes the house as it is: every module listed, none invented.

The module tables after ``<!-- modules -->`` are generated from the modules' own
docstrings (their first paragraph), one table per package, so the doc cannot drift
from the code. After adding, moving or re-describing a module, regenerate them:

    .venv/bin/python tests/test_architecture_doc.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
MARKER = "<!-- modules -->"


def _modules() -> dict[str, str]:
    """Every module of ``grid`` (generated Protobuf code aside) and its first paragraph."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "src" / "grid").rglob("*.py")):
        parts = path.relative_to(ROOT / "src").with_suffix("").parts
        if "proto_gen" in parts:
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        found[name] = " ".join(doc.strip().split("\n\n")[0].split())
    return found


def _package_of(module: str, packages: set[str]) -> str:
    """The package whose table lists ``module``: itself when it is a package."""
    if module in packages:
        return module
    return module.rsplit(".", 1)[0]


def render_tables() -> str:
    """The generated part of the doc: a table per package, modules in order."""
    modules = _modules()
    packages = {
        ".".join(p.relative_to(ROOT / "src").parts)
        for p in (ROOT / "src" / "grid").rglob("__init__.py")
        for p in [p.parent]
        if "proto_gen" not in p.parts
    }
    tables: dict[str, list[str]] = {}
    for name in sorted(modules):
        tables.setdefault(_package_of(name, packages), []).append(name)
    out: list[str] = []
    for package in sorted(tables):
        out += ["", f"### `{package}`", "", "| module | what it is |", "|---|---|"]
        for name in tables[package]:
            what = modules[name].replace("|", "\\|")
            out.append(f"| `{name}` | {what} |")
    return "\n".join(out) + "\n"


def test_every_module_is_listed_in_docs_architecture_as_its_docstring_says() -> None:
    listed = DOC.read_text().split(MARKER, 1)[1]
    assert listed == "\n" + render_tables(), (
        "docs/architecture.md's module tables are out of date: run "
        "`.venv/bin/python tests/test_architecture_doc.py` to regenerate them"
    )


def test_every_module_has_a_docstring() -> None:
    missing = sorted(name for name, what in _modules().items() if not what)
    assert not missing, f"these modules have no docstring: {missing}"


if __name__ == "__main__":
    head = DOC.read_text().split(MARKER, 1)[0]
    DOC.write_text(head + MARKER + "\n" + render_tables())
    sys.exit(0)
