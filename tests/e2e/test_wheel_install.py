"""Adding the package to an Airflow deployment: the wheel, installed with its ``[airflow]``
extra into a fresh virtualenv (only the pip cache is shared), brings everything the plugin
needs; Airflow loads the plugin and the hook's connection type by entry point and the
daily DAG parses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from .test_fresh_clone import ROOT, clean_environment

pytestmark = pytest.mark.slow


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 1200) -> str:
    result = subprocess.run(
        args, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{args}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_the_wheel_installs_into_a_fresh_airflow_and_its_plugin_and_dag_load(tmp_path):
    run(
        sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(ROOT)
    )
    [wheel] = tmp_path.glob("resumable_enrichment-*.whl")
    venv = tmp_path / "airflow-venv"
    clean = clean_environment()  # nothing of this checkout may look installed to pip
    run(sys.base_prefix + "/bin/python3.11", "-m", "venv", str(venv), env=clean)
    run(
        str(venv / "bin" / "pip"),
        "install",
        "--quiet",
        f"{wheel}[airflow]",
        "--constraint",
        str(ROOT / "constraints.txt"),
        env=clean,
    )
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "dags" / "enrich_customers.py", dags)
    env = {
        **clean,
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PATH": f"{venv / 'bin'}:{clean['PATH']}",
    }
    airflow = str(venv / "bin" / "airflow")
    plugins = json.loads(run(airflow, "plugins", "--output", "json", env=env).splitlines()[-1])
    assert "resumable_enrichment" in {p["name"] for p in plugins}
    hooks = json.loads(
        run(airflow, "providers", "hooks", "--output", "json", env=env).splitlines()[-1]
    )
    assert {"connection_type": "enrichment_api", "hook_name": "Enrichment API"}.items() <= next(
        h for h in hooks if h["package_name"] == "resumable-enrichment"
    ).items(), "the provider entry point registers the hook's connection type"
    run(airflow, "db", "migrate", env=env)
    run(airflow, "dags", "reserialize", env=env)
    errors = run(airflow, "dags", "list-import-errors", "--output", "json", env=env)
    assert json.loads(errors.splitlines()[-1]) == []
    listed = json.loads(run(airflow, "dags", "list", "--output", "json", env=env).splitlines()[-1])
    assert "enrich_customers" in {d["dag_id"] for d in listed}
