"""The Airflow operator over Spark Connect, end to end with ``airflow dags test``: a
``spark_connect`` connection (``AIRFLOW_CONN_*``, the provider's ``SparkConnectHook``)
makes the task run the job as a Connect client of the real server (``connect_support``,
whose workers lack this project), without spark-submit. The task is killed mid-run
(SIGKILL of the Airflow process with its client; the client's tasks on the server go
on); the next run of the same interval resumes, and the output is exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

import pytest

from demo.stack import BIN, ROOT, airflow, airflow_env, demo_api

from .airflow_support import init_airflow
from .job_support import read_output, write_input

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

ROWS = 3_000
DAG = """
import pendulum
from airflow.sdk import DAG
from enrichment_airflow.enrichment_operator import ResumableEnrichmentOperator

with DAG("enrich_connect", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")):
    ResumableEnrichmentOperator(
        task_id="enrich",
        spark_connect_conn_id="spark_connect_test",
        input_path="{data}/in",
        output_path="{data}/out",
        key_column="id",
        url_path="/customers/{{id}}",
        response_fields={{"name": "$.name"}},
        partitions=2,
        capacity=5,
        job_args=["--snapshot-interval", "0.5", "--lease-ttl", "3"],
    )
"""


def dags_test(env: dict[str, str]) -> subprocess.Popen:
    """``airflow dags test`` in its own process group (a kill takes its task with it)."""
    return subprocess.Popen(
        [str(BIN / "airflow"), "dags", "test", "enrich_connect", "2024-01-01"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_airflow_operator_runs_the_job_as_a_spark_connect_client(tmp_path, spark_connect):
    data = tmp_path / "data"
    ids = [f"k{i:04d}" for i in range(ROWS)]
    write_input(data / "in" / "part.jsonl", ids)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "enrich_connect.py").write_text(DAG.format(data=data))
    host, port = spark_connect.url.removeprefix("sc://").split(":")
    connection = {"conn_type": "spark_connect", "host": host, "port": int(port)}
    with demo_api("--latency-ms", "40") as api:
        env = airflow_env(
            tmp_path / "home",
            api.url,
            data,
            tmp_path / "snapshots",
            api_token="",  # the Connect server's executors have no such variable
            AIRFLOW__CORE__DAGS_FOLDER=str(dags),
            AIRFLOW_CONN_SPARK_CONNECT_TEST=json.dumps(connection),
        )
        del env["AIRFLOW_CONN_SPARK_ENRICH"]  # no spark-submit connection at all
        init_airflow(env)
        killed = dags_test(env)
        deadline = time.monotonic() + 600
        while sum(api.calls_per_key().values()) < ROWS // 4 and killed.poll() is None:
            assert time.monotonic() < deadline, "the first task never got going"
            time.sleep(0.2)
        if killed.poll() is not None:
            pytest.fail(f"dags test ended before the kill:\n{killed.stdout.read()[-6000:]}")
        os.killpg(killed.pid, signal.SIGKILL)
        first_log, _ = killed.communicate(timeout=30)
        at_kill = sum(api.calls_per_key().values())
        result = airflow(env, "dags", "test", "enrich_connect", "2024-01-01")
        total = api.settled_calls()
        per_key = api.calls_per_key()
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    assert "Spark-Submit cmd" not in first_log + log, "the provider's spark-submit ran"
    for line in (
        f"running enrich_job as a Spark Connect client of {spark_connect.url}",
        "shipped the job's code to the Spark Connect session",
        "resuming epoch",
        "enrichment summary",
    ):
        assert line in log, f"{line!r} not in the task log:\n{log[-5000:]}"
    rows, dead, summary = read_output(data / "out")
    assert Counter(r["id"] for r in rows + dead) == Counter(ids) and dead == []
    assert set(per_key) == set(ids) and ".try1." in summary["run_id"]
    print(
        f"\nAirflow over Connect: killed at {at_kill} calls; repeated after the kill: "
        f"{total - ROWS} (calls {total} - records {ROWS})"
    )
