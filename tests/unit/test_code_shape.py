"""The house rules (CONTRIBUTING.md "House rules") that a check can hold: functions fit on one
screen, and no module imports itself back through others. A module's size is left to
review: one topic per module, however long it is (Airflow's providers and aiohttp keep
one-topic modules of 500-1 900 lines); a line cap only made us cut cohesive code apart.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("spark_jobs", "plugins", "dags")
MAX_FUNCTION_LINES = 60


def sources() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


Function = ast.FunctionDef | ast.AsyncFunctionDef


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """(qualified name, node) of every function, methods and nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            qualified = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield qualified, node
            yield from functions(node, f"{qualified}.")
        else:
            yield from functions(node, prefix)


def function_sizes() -> dict[str, int]:
    """``path:Class.method`` -> lines from ``def`` to the last line of the body."""
    return {
        f"{name(path)}:{qualified}": node.end_lineno - node.lineno + 1
        for path in sources()
        for qualified, node in functions(ast.parse(path.read_text()))
        if node.end_lineno is not None
    }


def test_no_function_is_over_60_lines() -> None:
    over = {f: n for f, n in function_sizes().items() if n > MAX_FUNCTION_LINES}
    assert over == {}, "split these functions"


# Folders that are import roots, not packages: Airflow puts its plugins folder on sys.path
# (and the wheel installs plugins/enrichment_airflow as the package enrichment_airflow).
IMPORT_ROOTS = ("plugins",)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[0] in IMPORT_ROOTS:
        parts = parts[1:]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, package: str, known: set[str]) -> set[str]:
    """The ``known`` modules that ``source``, a module of ``package``, imports anywhere:
    type-only and function-local imports too (a cycle hidden behind ``TYPE_CHECKING`` or
    inside a function is still a cycle of design)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    return found & known


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in sources()}
    graph = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        graph[module] = imported_modules(path.read_text(), package, set(paths)) - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_cycle_finder_finds_cycles(graph, expected) -> None:
    assert cycles(graph) == expected


def test_imports_count_when_relative_type_only_or_local() -> None:
    """The store <-> retention cycle this check was first written for was type-only."""
    source = """
from typing import TYPE_CHECKING
from .manifest import Manifest
from . import paths
if TYPE_CHECKING:
    from .store import SnapshotStore
def later():
    import spark_jobs.asyncwait
"""
    known = {
        "spark_jobs.asyncwait",
        "spark_jobs.snapshots",
        "spark_jobs.snapshots.manifest",
        "spark_jobs.snapshots.paths",
        "spark_jobs.snapshots.store",
    }
    assert imported_modules(source, "spark_jobs.snapshots", known) == known - {
        "spark_jobs.snapshots"
    }
