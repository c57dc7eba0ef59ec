"""The Airflow operator for a POST JSON API with an API key in ``X-Api-Key``, end to end
with ``airflow dags test``: the key comes from the connection (``AIRFLOW_CONN_GEO_API``),
reaches the job by environment only, no ``Authorization`` header goes out, the task log
holds the job's lines without Spark's INFO, and a failed try says what the next will do."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from demo.stack import airflow, airflow_env

from .airflow_support import init_airflow
from .job_support import read_output
from .json_api_support import PATH, KeyedJsonApi

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

KEY = "k3y-9f2b7a-secret"
SPARK_INFO = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", re.M)
DAG = """
import pendulum
from airflow.sdk import DAG
from enrichment_airflow.enrichment_operator import ResumableEnrichmentOperator

with DAG("geocode", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")):
    ResumableEnrichmentOperator(
        task_id="geocode",
        api_conn_id="geo_api",
        input_path="{data}/in",
        output_path="{data}/out",
        key_column="id",
        url_path="{path}",
        method="POST",
        body_template={{"address": "{{street}}", "country": "DE"}},
        headers={{"Accept": "application/json"}},
        secret_headers={{"X-Api-Key": "password"}},
        response_fields={{"lat": "$.result.lat:float"}},
        partitions=2,
        job_args={job_args},
    )
"""


def run_dag(tmp: Path, port: int, job_args: list[str]) -> tuple[int, str]:
    data = tmp / "data"
    (data / "in").mkdir(parents=True)
    rows = [{"id": f"s{i:03d}", "street": f"{i} Hauptstr."} for i in range(30)]
    (data / "in" / "part.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "geocode.py").write_text(DAG.format(data=data, path=PATH, job_args=job_args))
    connection = {"conn_type": "http", "host": "127.0.0.1", "port": port, "password": KEY}
    env = airflow_env(
        tmp / "home",
        f"http://127.0.0.1:{port}",
        data,
        tmp / "snapshots",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW_CONN_GEO_API=json.dumps({**connection, "schema": "http"}),
    )
    init_airflow(env)
    result = airflow(env, "dags", "test", "geocode", "2024-01-01")
    return result.returncode, result.stdout + result.stderr


def test_airflow_operator_posts_json_with_the_key_from_the_connection(tmp_path):
    with KeyedJsonApi(KEY) as api:
        port = int(api.url.rsplit(":", 1)[1])
        status, log = run_dag(tmp_path, port, [])
        calls = list(api.calls)
    assert status == 0, log[-5000:]
    assert len(calls) == 30
    for call in calls:
        assert call["headers"]["X-Api-Key"] == KEY and "Authorization" not in call["headers"]
        assert call["body"]["country"] == "DE" and call["body"]["address"].endswith("Hauptstr.")
        assert call["headers"]["Accept"] == "application/json"
    data, dead, summary = read_output(tmp_path / "data" / "out")
    assert len(data) == 30 and dead == [] and summary["requests_made"] == 30
    assert KEY not in log, "the API key leaked into the task log or a command line"
    assert "starting fresh: no snapshot for this run yet" in log and "enrichment summary" in log
    assert SPARK_INFO.findall(log) == [], "Spark's INFO lines in the task log"


def test_airflow_operator_failure_says_what_the_next_try_does(tmp_path):
    with KeyedJsonApi(KEY) as api:
        port = int(api.url.rsplit(":", 1)[1])
        _, log = run_dag(tmp_path, port, ["--max-attempts", "0"])  # the job refuses it
    assert "--max-attempts: must be a positive integer" in log
    assert "enrich_job failed; the next try starts fresh: no snapshot was committed" in log
    assert KEY not in log
