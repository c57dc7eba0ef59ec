"""The DAGs under real Airflow: they import cleanly without heavy top-level work, and
``airflow dags test`` runs the daily enrichment end to end against the demo API with
Spark local[2], the token travelling from the connection to the job and nowhere else."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from demo.stack import ROOT, airflow, airflow_env, demo_api

from .airflow_support import init_airflow
from .job_support import read_output, write_input

pytestmark = pytest.mark.airflow


def test_every_dag_imports_without_errors(tmp_path):
    env = airflow_env(tmp_path / "home", "http://127.0.0.1:9", tmp_path, tmp_path)
    init_airflow(env)
    parsed = airflow(env, "dags", "reserialize")  # parse the folder as the dag-processor does
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr
    result = airflow(env, "dags", "list-import-errors", "--output", "json")
    assert result.returncode == 0, result.stderr
    assert json_output(result.stdout) == []
    listed = airflow(env, "dags", "list", "--output", "json")
    assert "enrich_customers" in {d["dag_id"] for d in json_output(listed.stdout)}


def json_output(stdout: str):
    """The CLI's JSON, past any warnings Airflow prints before it."""
    return json.loads(next(line for line in reversed(stdout.splitlines()) if line.startswith("[")))


def test_dag_files_do_no_heavy_work_at_import(tmp_path):
    probe = (
        # CPU seconds, not wall: on a busy machine the same import waits 15-25 s for a core.
        "import sys, time; t = time.process_time(); import dags.enrich_customers; "
        "heavy = [m for m in ('pyspark', 'aiohttp', 'pyspark.sql') if m in sys.modules]; "
        "print('PROBE', time.process_time() - t, *heavy)"
    )
    env = airflow_env(tmp_path / "home", "http://127.0.0.1:9", tmp_path, tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    _, seconds, *heavy = next(
        line for line in out.stdout.splitlines() if line.startswith("PROBE")
    ).split()
    assert heavy == [], f"imported at parse time: {heavy}"
    assert float(seconds) < 10


@pytest.mark.spark
@pytest.mark.slow
def test_dags_test_enriches_the_day_end_to_end(tmp_path):
    data = tmp_path / "data"
    ids = [f"c{i:05d}" for i in range(400)]
    write_input(data / "input" / "2024-01-01" / "part.jsonl", ids)
    token = "s3cr3t-token"  # the connection's password in airflow_env
    with demo_api("--token-env", "DEMO_API_TOKEN", env={"DEMO_API_TOKEN": token}) as api:
        env = airflow_env(
            tmp_path / "home", api.url, data, tmp_path / "snapshots", DEMO_API_TOKEN=token
        )
        init_airflow(env)
        result = airflow(env, "dags", "test", "enrich_customers", "2024-01-01")
        log = result.stdout + result.stderr
        assert result.returncode == 0, log[-5000:]
        assert api.get("/stats")["by_status"] == {"200": 400}, "every call authenticated"
    data_rows, dead, summary = read_output(data / "output" / "2024-01-01")
    assert sorted(r["id"] for r in data_rows) == ids and dead == []
    assert all(r["city"] and r["segment"] for r in data_rows)
    assert summary["resumed"] is False and summary["requests_made"] == 400
    assert "starting fresh: no snapshot for this run yet" in log
    assert token not in log, "the API token leaked into the task log"
    assert "Failed to import plugin" not in log


@pytest.mark.spark
@pytest.mark.slow
def test_a_spent_request_budget_fails_the_task_once_saying_what_is_left(tmp_path):
    """The Airflow outcome of ``max_requests``: failed without automatic retries (a retry
    would spend another budget at once), with a message that says how to resume."""
    data = tmp_path / "data"
    write_input(data / "input" / "2024-01-01" / "part.jsonl", [f"c{i:05d}" for i in range(300)])
    with demo_api() as api:
        env = airflow_env(tmp_path / "home", api.url, data, tmp_path / "snapshots")
        init_airflow(env)
        conf = json.dumps({"max_requests": 100})
        result = airflow(env, "dags", "test", "enrich_customers", "2024-01-01", "--conf", conf)
        calls = sum(api.calls_per_key().values())
    log = result.stdout + result.stderr
    assert "request budget spent: 100 of 300 records done, 200 left; clear this task" in log
    assert calls == 100, "a retry spent the budget again"


def test_the_plugin_registers_its_app_view_and_link_by_entry_point():
    from importlib.metadata import entry_points
    from types import SimpleNamespace

    [entry] = [e for e in entry_points(group="airflow.plugins") if e.name == "resumable_enrichment"]
    plugin = entry.load()
    assert plugin.fastapi_apps[0]["url_prefix"] == "/enrichment"
    assert plugin.external_views[0]["href"] == "/enrichment/"
    [link] = plugin.operator_extra_links
    ti_key = SimpleNamespace(dag_id="enrich_customers", task_id="enrich")
    assert (
        link.get_link(None, ti_key=ti_key) == "/enrichment/?dag_id=enrich_customers&task_id=enrich"
    )


@pytest.mark.parametrize(
    ("param", "value"),
    [("capacity", 10**6), ("partitions", 10**5), ("snapshot_interval", 86_400), ("capacity", 0)],
)
def test_dag_params_refuse_values_out_of_range(param, value):
    from airflow.sdk.exceptions import ParamValidationError

    from dags.enrich_customers import dag

    with pytest.raises(ParamValidationError):
        dag.params.get_param(param).resolve(value)
