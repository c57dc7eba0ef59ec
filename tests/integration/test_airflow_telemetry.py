"""Airflow's operator watched from outside, end to end with ``airflow dags test``: one run
with OpenLineage's file transport, Airflow's metrics on OpenTelemetry and the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` set, all pointed at real receivers on loopback. The
lineage event, Airflow's metrics, the job's own metrics and the Asset event carry the
numbers of ``_SUMMARY.json``; the Spark job gets the task's OpenLineage parent job as the
Spark provider injects it."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from demo.stack import airflow, airflow_env, demo_api

from .airflow_support import init_airflow
from .job_support import read_output, write_input
from .otlp_support import OtlpReceiver

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

DAG = """
import pendulum
from airflow.sdk import DAG, Asset
from enrichment_airflow.enrichment_operator import ResumableEnrichmentOperator

with DAG("watched", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")):
    ResumableEnrichmentOperator(
        task_id="enrich",
        input_path="{data}/in",
        output_path="{data}/out",
        key_column="id",
        url_path="/customers/{{id}}",
        response_fields={{"name": "$.name"}},
        partitions=2,
        cost_per_request=0.002,
        outlets=[Asset("enriched", uri="file://{data}/out")],
        job_args=["--otel-interval", "1", "--snapshot-interval", "0.5"],
    )
"""
ROWS = 60


def lineage_events(path: Path, job: str, timeout: float = 120) -> list[dict]:
    """The events of ``job`` once its COMPLETE one is written (the listener emits from a
    process of its own, which may still be writing when ``dags test`` returns)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        events = [json.loads(line) for line in lines if line.strip()]
        mine = [e for e in events if e["job"]["name"] == job]
        if any(e["eventType"] == "COMPLETE" for e in mine) or time.monotonic() > deadline:
            return mine
        time.sleep(0.5)


def run_dag(tmp: Path, api_url: str, receiver: OtlpReceiver) -> tuple[int, str]:
    data = tmp / "data"
    write_input(
        data / "in" / "part.jsonl", [f"c{i:03d}" for i in range(ROWS)], extra_lines=["{not json"]
    )  # one dead letter
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "watched.py").write_text(DAG.format(data=data))
    port = receiver.url.rsplit(":", 1)[1]
    env = airflow_env(
        tmp / "home",
        api_url,
        data,
        tmp / "snapshots",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__OPENLINEAGE__NAMESPACE="tests",
        AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(
            {"type": "file", "log_file_path": str(tmp / "lineage.jsonl"), "append": True}
        ),
        AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO="True",
        AIRFLOW__METRICS__OTEL_ON="True",
        AIRFLOW__METRICS__OTEL_HOST="127.0.0.1",
        AIRFLOW__METRICS__OTEL_PORT=port,
        OTEL_METRIC_EXPORT_INTERVAL="500",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,  # the job's metrics: no flag needed
    )
    init_airflow(env)
    result = airflow(env, "dags", "test", "watched", "2024-01-01")
    return result.returncode, result.stdout + result.stderr


def test_airflow_operator_reports_lineage_metrics_and_cost(tmp_path):
    with OtlpReceiver() as receiver, demo_api("--latency-ms", "2") as api:
        status, log = run_dag(tmp_path, api.url, receiver)
        assert status == 0, log[-5000:]
        requests = api.settled_calls()
        events = lineage_events(tmp_path / "lineage.jsonl", "watched.enrich")
        _, _, summary = read_output(tmp_path / "data" / "out")
        job_points = [p for p in receiver.latest() if "enrichment.run_id" in p.resource]
        airflow_points = {
            p.metric: p for p in receiver.latest() if p.metric.startswith("airflow.enrichment.")
        }

    assert (summary["records_in"], summary["enriched"], summary["dead_letters"]) == (61, 60, 1)
    assert summary["requests_made"] == requests == ROWS
    [complete] = [e for e in events if e["eventType"] == "COMPLETE"]
    data = tmp_path / "data"
    inputs = {(d["namespace"], d["name"]): d for d in complete["inputs"]}
    outputs = {(d["namespace"], d["name"]): d for d in complete["outputs"]}
    api_dataset = (api.url, "/customers/{id}")
    assert set(inputs) == {("file", str(data / "in")), api_dataset}
    assert inputs["file", str(data / "in")]["inputFacets"]["inputStatistics"]["rowCount"] == 61
    assert inputs[api_dataset]["inputFacets"]["inputStatistics"]["rowCount"] == ROWS
    rows = {
        name: d["outputFacets"]["outputStatistics"]["rowCount"] for (_, name), d in outputs.items()
    }
    assert rows == {str(data / "out"): 60, str(data / "out" / "dead_letters"): 1}
    facet = complete["run"]["facets"]["enrichment"]
    assert (facet["enriched"], facet["deadLetters"], facet["requestsMade"]) == (60, 1, ROWS)
    assert facet["cost"] == summary["cost"] and facet["cost"]["estimated_cost"] == 0.12
    assert "s3cr3t" not in json.dumps(events)  # the connection's token goes nowhere

    # The Spark job got the task's OpenLineage run as its parent, as the provider injects it.
    parent = summary["lineage_parent"]
    assert (parent["name"], parent["run_id"]) == ("watched.enrich", complete["run"]["runId"])
    assert {p.resource["openlineage.parent.run.id"] for p in job_points} == {parent["run_id"]}
    enriched = sum(p.value for p in job_points if p.metric == "enrichment.records.enriched")
    assert enriched == 60
    assert sum(p.count for p in job_points if p.metric == "http.client.request.duration") == ROWS

    # Airflow's own metrics (OTel here; StatsD alike), and the Asset event, carry the cost.
    assert airflow_points["airflow.enrichment.enriched"].value == 60
    assert airflow_points["airflow.enrichment.requests_made"].value == ROWS
    assert airflow_points["airflow.enrichment.estimated_cost"].value == pytest.approx(0.12)
    with sqlite3.connect(tmp_path / "home" / "airflow.db") as db:
        [(extra,)] = db.execute("SELECT extra FROM asset_event").fetchall()
    assert json.loads(extra)["cost"] == summary["cost"]
