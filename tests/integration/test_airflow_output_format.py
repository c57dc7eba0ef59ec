"""The Airflow operator's output format, write mode and dead-letter layout become the
job's flags, and the job's own parser accepts what the operator builds; a bad value
stops the task before anything is submitted, naming the parameter."""

from __future__ import annotations

import json

import pytest

from enrichment_airflow.enrichment_hook import EnrichmentApiHook
from enrichment_airflow.job_arguments import job_arguments
from spark_jobs.snapshots import NamespaceKey
from spark_jobs.spec.job_cli import parse_args

from .operator_support import enrichment_operator

pytestmark = pytest.mark.airflow

KEY = NamespaceKey("enrich_customers", "enrich", "2026-12-01T00:00:00+00:00")


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path) -> EnrichmentApiHook:
    connection = {"conn_type": "enrichment_api", "host": "api", "port": 8080}
    monkeypatch.setenv("AIRFLOW_CONN_ENRICHMENT_API", json.dumps(connection))
    return EnrichmentApiHook(snapshot_root=str(tmp_path / "snapshots"))


def test_airflow_operator_passes_a_delta_output_to_the_job(api: EnrichmentApiHook) -> None:
    operator = enrichment_operator(
        output_path="/data/tables/customers",
        output_format="delta",
        write_mode="merge",
        dead_letter_layout="inline",
    )
    spec = parse_args(job_arguments(operator, api, KEY, "run-1", []))
    assert (spec.output_format, spec.write_mode, spec.dead_letter_layout) == (
        "delta",
        "merge",
        "inline",
    )
    assert spec.output == "/data/tables/customers" and spec.interval_start == KEY.interval_start


def test_airflow_operator_keeps_parquet_the_default(api: EnrichmentApiHook) -> None:
    arguments = job_arguments(enrichment_operator(), api, KEY, "run-1", [])
    assert "--write-mode" not in arguments and "--dead-letter-layout" not in arguments
    assert parse_args(arguments).output_format == "parquet"


@pytest.mark.parametrize(
    ("parameter", "value"),
    [("output_format", "delta-lake"), ("write_mode", "upsert"), ("dead_letter_layout", "none")],
)
def test_airflow_operator_refuses_a_bad_output_option(
    api: EnrichmentApiHook, parameter: str, value: str
) -> None:
    operator = enrichment_operator(**{"output_format": "delta", parameter: value})
    with pytest.raises(ValueError, match=f"{parameter} must be one of .*{value}"):
        job_arguments(operator, api, KEY, "run-1", [])
