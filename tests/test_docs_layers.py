"""docs/concepts.md's table of layers names every package of marljoint and, for each, exactly the imports the
import-contract test forbids it."""

import re
from pathlib import Path

from tests.test_import_contract import ENTRY_MODULES, FORBIDDEN, LIBRARY_FORBIDDEN, PRODUCT, ROOT

DOC = Path(__file__).resolve().parents[1] / "docs" / "concepts.md"


def _table() -> dict[str, set[str]]:
    """``{package: names in its "never imports" cell}`` from the table under "## Layers"."""
    section = DOC.read_text().split("## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        never = set(re.findall(r"`([A-Za-z_.]+)`", cells[-1]))
        for name in re.findall(r"`([a-z_]+)(?:/|\.py)`", cells[0]):
            rows[name] = never
    return rows


def _forbidden(package: str) -> set[str]:
    banned = FORBIDDEN.get(package, ()) + (() if package in PRODUCT else LIBRARY_FORBIDDEN)
    return {name.removeprefix("marljoint.") for name in banned}


def test_the_table_names_every_package_and_top_level_module():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    modules = {p.stem for p in ROOT.glob("*.py") if p.name not in ENTRY_MODULES}
    assert set(_table()) == packages | modules


def test_each_row_names_exactly_what_the_contract_forbids():
    rows = _table()
    assert {package: rows[package] for package in rows} == {package: _forbidden(package) for package in rows}
