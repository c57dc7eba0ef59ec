"""The layout table (``docs/layout.md``, the only one) matches the tree: every file or folder
it names exists, and every module under the shipped and demo folders is named in it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "docs" / "layout.md"
# Folders whose every module, at any depth, the table names (the others are described in words).
LISTED_IN_FULL = ("spark_jobs", "plugins", "dags", "demo")
FILE_NAME = r"`([\w./-]+\.(?:py|md|yaml|properties|js|css)|[\w./-]+/)`"


def layout_rows() -> list[tuple[str, str]]:
    table = LAYOUT.read_text().split("| path | what it is for |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| (.+?) \| (.+) \|$", table, flags=re.M)
    return [(path, text) for path, text in rows if not path.startswith("---")]


def named_paths() -> dict[str, list[Path]]:
    """Each name in backticks that looks like a file or folder -> where it may be: relative
    to the row's folder (the first name of its path cell) or to a folder above it, up to the
    repository's root."""
    names: dict[str, list[Path]] = {}
    for path_cell, text in layout_rows():
        first = re.findall(r"`([^`]+)`", path_cell)[0]
        base = ROOT / first if first.endswith("/") else (ROOT / first).parent
        folders = [base, *(p for p in base.parents if p.is_relative_to(ROOT))]
        for name in re.findall(FILE_NAME, path_cell + " " + text):
            names.setdefault(name, []).extend(folder / name for folder in folders)
    return names


def test_every_name_in_the_layout_table_exists():
    missing = [
        name for name, places in named_paths().items() if not any(p.exists() for p in places)
    ]
    assert missing == []


def test_every_module_of_the_fully_listed_folders_is_named():
    named = {p.resolve() for places in named_paths().values() for p in places if p.is_file()}
    unnamed = [
        str(module.relative_to(ROOT))
        for folder in LISTED_IN_FULL
        for module in sorted((ROOT / folder).rglob("*.py"))
        if module.name != "__init__.py" and module.resolve() not in named
    ]
    assert unnamed == [], "name them in docs/layout.md's layout table"


def test_the_layout_table_is_only_in_docs_layout():
    """One table: the README and CONTRIBUTING link to it instead of repeating a layout."""
    for page in ("README.md", "CONTRIBUTING.md"):
        assert "| path |" not in (ROOT / page).read_text(), page
