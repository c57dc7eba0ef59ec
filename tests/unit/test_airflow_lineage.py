"""The Airflow operator's OpenLineage datasets: names as OpenLineage's naming conventions
write them, and no query string or credential of the API's URL in them."""

from __future__ import annotations

import os

import pytest

from enrichment_airflow.lineage import api_dataset, dataset_name, lineage_on_complete
from spark_jobs.records.summary import JobSummary


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("/data/in", ("file", "/data/in")),
        ("file:///data/in/*.jsonl", ("file", "/data/in/*.jsonl")),
        ("s3a://bucket/daily/in", ("s3://bucket", "/daily/in")),
        ("s3://bucket/out", ("s3://bucket", "/out")),
        ("hdfs://namenode:8020/out", ("hdfs://namenode:8020", "/out")),
    ],
)
def test_datasets_are_named_by_openlineage_conventions(url, expected):
    assert dataset_name(url) == expected


def test_a_relative_path_is_named_absolutely():
    assert dataset_name("in") == ("file", os.path.abspath("in"))


def test_the_api_dataset_holds_no_credential_or_query():
    url = "https://user:pw@crm.example:8443/v1/customers/{id}?key=secret"
    assert api_dataset(url) == ("https://crm.example:8443", "/v1/customers/{id}")


def test_the_counts_and_cost_come_from_the_summary():
    summary = {
        "records_in": 10,
        "enriched": 8,
        "dead_letters": 2,
        "requests_made": 9,
        "run_id": "r1",
        "cost": {"requests_made": 9, "estimated_cost": 0.09},
    }
    lineage = lineage_on_complete(
        "/in", "/out", "http://api:80/c/{id}", JobSummary.from_json(summary)
    )
    rows = {d.name: d.outputFacets["outputStatistics"].rowCount for d in lineage.outputs}
    assert rows == {"/out": 8, "/out/dead_letters": 2}
    assert [d.inputFacets["inputStatistics"].rowCount for d in lineage.inputs] == [10, 9]
    facet = lineage.run_facets["enrichment"]
    assert (facet.requestsMade, facet.cost["estimated_cost"], facet.runId) == (9, 0.09, "r1")


def delta_summary(dead_letters: dict[str, object] | None) -> JobSummary:
    table: dict[str, object] = {
        "format": "delta",
        "identity": "dag/enrich/2026-12-01@1",
        "data": {"uri": "s3://lake/customers", "version": 7, "committed": True},
    }
    if dead_letters is not None:
        table["dead_letters"] = dead_letters
    summary = {"records_in": 10, "enriched": 8, "dead_letters": 2, "table": table}
    return JobSummary.from_json(summary)


def test_a_delta_output_is_the_table_with_the_version_committed():
    dead = {"uri": "s3://lake/customers_dead_letters", "version": 3, "committed": False}
    lineage = lineage_on_complete(
        "/in", "s3://lake/customers", "http://api:80/c/{id}", delta_summary(dead)
    )
    found = {
        (d.namespace, d.name): (
            d.facets["storage"].storageLayer,
            d.facets["version"].datasetVersion,
            d.outputFacets["outputStatistics"].rowCount,
        )
        for d in lineage.outputs
    }
    assert found == {
        ("s3://lake", "/customers"): ("delta", "7", 8),
        ("s3://lake", "/customers_dead_letters"): ("delta", "3", 2),
    }


def test_inline_dead_letters_are_rows_of_the_one_table():
    lineage = lineage_on_complete(
        "/in", "s3://lake/customers", "http://api/c/{id}", delta_summary(None)
    )
    assert [(d.name, d.outputFacets["outputStatistics"].rowCount) for d in lineage.outputs] == [
        ("/customers", 10)
    ]
