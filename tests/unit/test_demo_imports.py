"""The demo and benchmark programs are not type-checked by ``make lint`` (they are not
shipped), but ``make demo`` and ``make bench*`` run them from a fresh clone: each module
must at least import against the package as it is now (a renamed or removed name fails
here, in seconds, instead of twenty minutes into the fresh-clone test)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted(
    ".".join(path.relative_to(ROOT).with_suffix("").parts)
    for folder in ("demo", "benchmarks")
    for path in (ROOT / folder).rglob("*.py")
    if path.name != "__init__.py"
)


@pytest.mark.parametrize("module", PROGRAMS)
def test_the_program_imports(module: str) -> None:
    importlib.import_module(module)
