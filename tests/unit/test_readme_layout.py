"""The README's layout table matches the tree: every file or folder it names exists, and
every module of the job's top level, the enrichers and the plugin is named in it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Folders whose every module the table names (the others are described in words).
LISTED_IN_FULL = ("spark_jobs", "spark_jobs/enrichers", "plugins")


def layout_rows() -> list[tuple[str, str]]:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("| path | what lives there |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| (.+?) \| (.+?) \|$", table, flags=re.M)
    return [(path, text) for path, text in rows if not path.startswith("---")]


def named_files() -> dict[str, Path]:
    """Each name in backticks that looks like a file or folder -> the row's folder."""
    names = {}
    for path_cell, text in layout_rows():
        first = re.findall(r"`([^`]+)`", path_cell)[0]
        base = ROOT / first if first.endswith("/") else (ROOT / first).parent
        for name in re.findall(r"`([\w./-]+\.(?:py|md|yaml)|[\w./-]+/)`", path_cell + text):
            names[name] = base
    return names


def test_every_name_in_the_layout_table_exists():
    missing = []
    for name, base in named_files().items():
        here = [ROOT / name, base / name, *base.rglob(name.rstrip("/"))]
        if not any(p.exists() for p in here):
            missing.append(name)
    assert missing == []


def test_every_module_of_the_fully_listed_folders_is_named():
    named = {Path(n).name for n in named_files()}
    unnamed = [
        str(module.relative_to(ROOT))
        for folder in LISTED_IN_FULL
        for module in sorted((ROOT / folder).glob("*.py"))
        if module.name != "__init__.py" and module.name not in named
    ]
    assert unnamed == [], "name them in the README's layout table"
