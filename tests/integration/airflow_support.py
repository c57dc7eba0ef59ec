"""A real Airflow installation for tests: a project-local AIRFLOW_HOME with SQLite, the
repository's DAGs, connections and variables from the environment (AIRFLOW_CONN_*,
AIRFLOW_VAR_*), as users configure it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def airflow_env(
    home: Path, api_url: str, data_root: Path, snapshot_root: Path, **extra: str
) -> dict[str, str]:
    (home / "plugins").mkdir(parents=True, exist_ok=True)  # the plugin comes by entry point
    host, port = api_url.removeprefix("http://").split(":")
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW_CONN_SPARK_ENRICH": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_ENRICHMENT_API": json.dumps(
            {
                "conn_type": "http",
                "host": host,
                "port": int(port),
                "schema": "http",
                "password": "s3cr3t-token",
            }
        ),
        "AIRFLOW_VAR_ENRICHMENT_DATA_ROOT": str(data_root),
        "AIRFLOW_VAR_ENRICHMENT_SNAPSHOT_ROOT": str(snapshot_root),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        **extra,
    }


def airflow(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "airflow"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def init_airflow(env: dict[str, str]) -> None:
    for command in (("db", "migrate"), ("pools", "set", "enrichment_api", "4", "API load")):
        result = airflow(env, *command)
        assert result.returncode == 0, result.stdout + result.stderr
