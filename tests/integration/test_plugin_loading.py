"""Both ways Airflow finds the plugin, and nothing generic installed: Airflow's plugins
folder (the repository's ``plugins/``: one entry file, the package kept out of the loader
by ``.airflowignore``), and the wheel (``spark_jobs`` and ``enrichment_airflow`` only, the
plugin and the provider by entry point). Each check runs in its own interpreter, so no
import of this test process can stand in for the one being checked."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow

# What Airflow does with its plugins folder: on sys.path, then every .py not ignored
# imported as a top-level module.
FOLDER_PROBE = """
import json, sys
folder = sys.argv[1]
sys.path.insert(0, folder)
from airflow._shared.plugins_manager.plugins_manager import _load_plugins_from_plugin_directory
plugins, errors = _load_plugins_from_plugin_directory(folder)
print(json.dumps({
    "plugins": [type(p).__module__ + "." + type(p).__name__ for p in plugins],
    "errors": errors,
    "file": sys.modules["enrichment_airflow.plugin"].__file__,
}))
"""

# Only the --target directory: no checkout, no editable install of it.
WHEEL_PROBE = """
import importlib.metadata, json, sys
target, checkout = sys.argv[1], sys.argv[2]
sys.meta_path[:] = [f for f in sys.meta_path if "resumable_enrichment" not in repr(f)]
sources = {checkout, f"{checkout}/plugins"}  # the venv may live in the checkout: keep it
sys.path[:] = [target, *(p for p in sys.path[1:] if p and p.rstrip("/") not in sources)]
[dist] = importlib.metadata.distributions(path=[target])
loaded = {e.group: e.load() for e in dist.entry_points}
for name in ("plugins", "demo"):
    try:
        __import__(name)
        print(f"{name} is importable", file=sys.stderr)
        sys.exit(1)
    except ImportError:
        pass
print(json.dumps({
    "plugin": loaded["airflow.plugins"].__module__,
    "provider": loaded["apache_airflow_provider"]()["package-name"],
    "file": sys.modules["enrichment_airflow.plugin"].__file__,
}))
"""


def probe(script: str, argument: Path, cwd: Path, **env: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", script, str(argument), str(ROOT)],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_airflows_plugins_folder_loads_the_plugin_once_without_import_errors(tmp_path):
    # spark_jobs from this checkout, as a cluster's Airflow has it installed.
    found = probe(FOLDER_PROBE, ROOT / "plugins", tmp_path, PYTHONPATH=str(ROOT))
    assert found["errors"] == {}
    assert found["plugins"] == ["enrichment_airflow.plugin.ResumableEnrichmentPlugin"]
    assert Path(found["file"]) == ROOT / "plugins" / "enrichment_airflow" / "plugin.py"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        timeout=600,
    )
    [built] = out.glob("resumable_enrichment-*.whl")
    return built


def test_the_wheel_installs_two_distinct_names_and_no_plugins_or_demo(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        declared = archive.read(entry_points).decode()
    top_level = {
        name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")
    }
    assert top_level == {"spark_jobs", "enrichment_airflow"}
    assert "enrichment_airflow.plugin:ResumableEnrichmentPlugin" in declared
    assert "enrichment_airflow.provider:get_provider_info" in declared
    assert "plugins." not in declared
    # Package data travels with the moved modules.
    assert "spark_jobs/session/log4j2.properties" in names
    assert {"enrichment_airflow/web/page.css", "enrichment_airflow/web/page.js"} <= set(names)


def test_the_installed_wheel_loads_the_plugin_and_provider_by_entry_point(wheel, tmp_path):
    target = tmp_path / "target"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-t", str(target), str(wheel)],
        check=True,
        timeout=300,
    )
    found = probe(WHEEL_PROBE, target, tmp_path, PYTHONPATH="")
    assert found["plugin"] == "enrichment_airflow.plugin"
    assert found["provider"] == "resumable-enrichment"
    assert Path(found["file"]).is_relative_to(target)
