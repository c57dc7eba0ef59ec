"""The house's layers, held by a test over the import graph (docs/architecture.md, "Layers").

Each package of ``spark_jobs`` may import only the packages below it: the async wait
operator, then the enrichers, the partition runner, the session (the JVM, Spark
Connect) and the driver (the run); the snapshots, the telemetry and the typed records
are leaves (the records import the standard library only);
the spec sits above neither the driver nor the telemetry. The Airflow side (the plugin and
the DAG) reads the snapshots, the defaults, how the job is launched, the typed records and
the exit statuses, so
Airflow's web server never loads the spec, the enrichers (aiohttp), the session or the
driver (PySpark).
Every import counts: module-level, type-only and inside a function
(``test_code_shape.imported_modules``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from .test_code_shape import ROOT, import_graph

RECORDS = "spark_jobs.records"
DEFAULTS = "spark_jobs.defaults"
LAUNCH = "spark_jobs.launch"
EXIT_STATUS = "spark_jobs.exit_status"
SNAPSHOTS = "spark_jobs.snapshots"
TELEMETRY = "spark_jobs.telemetry"
ASYNCWAIT = "spark_jobs.asyncwait"
ENRICHERS = "spark_jobs.enrichers"
SPEC = "spark_jobs.spec"
RUNNER = "spark_jobs.partition_runner"
SESSION = "spark_jobs.session"
DRIVER = "spark_jobs.driver"
#: What the Airflow side may import of the job's package.
AIRFLOW_SIDE = {SNAPSHOTS, DEFAULTS, LAUNCH, RECORDS, EXIT_STATUS}
LEAVES = {RECORDS, DEFAULTS, LAUNCH, EXIT_STATUS}

#: The packages each package may import (besides itself and the standard library).
MAY_IMPORT: dict[str, set[str]] = {
    "spark_jobs": set(),
    RECORDS: set(),
    DEFAULTS: set(),
    LAUNCH: set(),
    EXIT_STATUS: set(),
    SNAPSHOTS: LEAVES,
    TELEMETRY: LEAVES,
    ASYNCWAIT: LEAVES,
    ENRICHERS: LEAVES | {ASYNCWAIT, TELEMETRY},
    SPEC: LEAVES | {SNAPSHOTS, ENRICHERS},
    RUNNER: LEAVES | {SNAPSHOTS, TELEMETRY, ASYNCWAIT, ENRICHERS, SPEC},
    SESSION: LEAVES | {"spark_jobs", ENRICHERS, SPEC},
    DRIVER: LEAVES
    | {SESSION, "spark_jobs", SNAPSHOTS, TELEMETRY, ASYNCWAIT, ENRICHERS, SPEC, RUNNER},
    "spark_jobs.enrich_job": {DRIVER},
    "enrichment_airflow": AIRFLOW_SIDE,
    "resumable_enrichment": {"enrichment_airflow"},
    "dags": AIRFLOW_SIDE | {"enrichment_airflow"},
}


def package(module: str) -> str:
    """``spark_jobs.driver.job`` -> ``spark_jobs.driver``; a plugin or DAG module -> its root."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "spark_jobs" else parts[0]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``module -> imported`` for each import the layers do not allow; a package with no
    place in :data:`MAY_IMPORT` is one too (a new package must be given its place)."""
    found = []
    for module, imported in sorted(graph.items()):
        mine = package(module)
        if mine not in MAY_IMPORT:
            found.append(f"{module}: package {mine} has no place in the layers")
            continue
        allowed = MAY_IMPORT[mine] | {mine}
        found += [f"{module} -> {t}" for t in sorted(imported) if package(t) not in allowed]
    return found


def test_every_package_imports_only_the_layers_below_it() -> None:
    assert layer_violations(import_graph()) == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"spark_jobs.enrichers.http": {"spark_jobs.asyncwait.operator"}}, []),
        (
            {"spark_jobs.asyncwait.operator": {"spark_jobs.enrichers.http"}},
            ["spark_jobs.asyncwait.operator -> spark_jobs.enrichers.http"],
        ),
        (
            {"spark_jobs.spec.job_spec": {"spark_jobs.telemetry"}},
            ["spark_jobs.spec.job_spec -> spark_jobs.telemetry"],
        ),
        (
            {"enrichment_airflow.web.views": {"spark_jobs.driver.summary"}},
            ["enrichment_airflow.web.views -> spark_jobs.driver.summary"],
        ),
        (
            {"enrichment_airflow.connect_job": {"spark_jobs.session.connect"}},
            ["enrichment_airflow.connect_job -> spark_jobs.session.connect"],
        ),
        (
            {"spark_jobs.session.connect": {"spark_jobs.driver.job"}},
            ["spark_jobs.session.connect -> spark_jobs.driver.job"],
        ),
        (
            {"spark_jobs.new_room.x": set()},
            ["spark_jobs.new_room.x: package spark_jobs.new_room has no place in the layers"],
        ),
    ],
)
def test_the_layer_check_names_what_crosses(graph, expected) -> None:
    assert layer_violations(graph) == expected


def outside_imports(path: Path) -> set[str]:
    """The top-level names of the absolute imports of ``path`` outside ``spark_jobs``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - {"spark_jobs"}


def test_the_typed_records_import_the_standard_library_only() -> None:
    """The DAG and Airflow's web server import them at every parse and page."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    found = {
        path.name: sorted(outside_imports(path) - stdlib)
        for path in sorted((ROOT / "spark_jobs" / "records").glob("*.py"))
    }
    assert {name: names for name, names in found.items() if names} == {}


#: Run in a fresh interpreter: Airflow's API server as it is before it loads plugins (its
#: own execution API loads aiohttp, through ``svcs``), then the plugin, its FastAPI app
#: and its web modules, with aiohttp and PySpark refused.
WEB_SERVER = """
import sys
import airflow.api_fastapi.app

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("aiohttp", "pyspark"):
            raise ImportError(f"the plugin's web server imports {name}")
        return None

for name in [m for m in sys.modules if m.split(".")[0] in ("aiohttp", "pyspark")]:
    del sys.modules[name]
sys.meta_path.insert(0, Refuse())
import enrichment_airflow.plugin
import enrichment_airflow.web.app, enrichment_airflow.web.views, enrichment_airflow.web.page
print(sorted({".".join(m.split(".")[:2]) for m in sys.modules if m.startswith("spark_jobs.")}))
"""


def test_airflow_s_web_server_imports_neither_aiohttp_nor_pyspark() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WEB_SERVER],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    assert loaded <= AIRFLOW_SIDE, loaded
