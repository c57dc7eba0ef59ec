"""What ``ResumableEnrichmentOperator`` tells OpenLineage when its task completes.

Airflow's OpenLineage provider calls the operator's ``get_openlineage_facets_on_complete``
after ``execute``; this module builds the answer from the run's summary (only then are
the counts known). Imported only by that method, so the operator works without the
provider installed.

* inputs: the input files (``inputStatistics``: records read) and the **API endpoint as
  a dataset** (``inputStatistics``: requests made). The answers are data that flows into
  the output's columns; as a dataset the API shows up in the lineage graph of every job
  that reads it, so "what depends on the CRM API?" and "what did its outage touch?" are
  graph queries, which a job facet, hidden inside one job, would not answer. Its
  namespace is the connection's scheme, host and port; its name the path template, never
  a query or a credential.
* outputs: the result (``<output>``, whose ``_SUMMARY.json`` names the run folder) and
  its dead letters (``<output>/dead_letters``), each with ``outputStatistics``. A table
  output is the table itself, named as OpenLineage names a Delta table on storage (its
  location), with the ``storage`` facet (``delta``, ``parquet``) and the ``version``
  facet naming the table version holding the run's rows; its dead-letter table beside
  it likewise, or none when dead letters are inline (the table's row count holds them).
* run facet ``enrichment``: the summary's counts and cost (:class:`EnrichmentRunFacet`).

Dataset names follow OpenLineage's naming: ``file`` and an absolute path for local files,
``s3://bucket`` and the key for S3, ``scheme://authority`` and the path otherwise.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import attr
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import Dataset, InputDataset, OutputDataset
from openlineage.client.facet_v2 import RunFacet
from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
from openlineage.client.generated.input_statistics_input_dataset import (
    InputStatisticsInputDatasetFacet,
)
from openlineage.client.generated.output_statistics_output_dataset import (
    OutputStatisticsOutputDatasetFacet,
)
from openlineage.client.generated.storage_dataset import StorageDatasetFacet

from spark_jobs.records.summary import JobSummary, TableVersion

DEAD_LETTERS = "dead_letters"


@attr.define
class EnrichmentRunFacet(RunFacet):
    """The run's counts and cost, as in its ``_SUMMARY.json`` (camelCase, as OpenLineage
    names facet fields)."""

    recordsIn: int
    enriched: int
    deadLetters: int
    requestsMade: int
    replayedFromSnapshot: int
    resumed: bool
    cost: dict[str, Any]
    runId: str
    result: str | None = None

    @staticmethod
    def _get_schema() -> str:
        return "urn:resumable-enrichment:openlineage:EnrichmentRunFacet:1"


def dataset_name(url: str) -> tuple[str, str]:
    """(namespace, name) of the data at ``url`` (a path, ``file://``, ``s3://``...)."""
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        return "file", os.path.abspath(parts.path if parts.scheme else url)
    scheme = "s3" if parts.scheme in ("s3a", "s3n") else parts.scheme
    return f"{scheme}://{parts.hostname or ''}{_port(parts.port)}", parts.path or "/"


def api_dataset(url_template: str) -> tuple[str, str]:
    """(namespace, name) of the API: scheme, host and port; the path template."""
    parts = urlsplit(url_template)
    return f"{parts.scheme}://{parts.hostname}{_port(parts.port)}", parts.path or "/"


def _port(port: int | None) -> str:
    return f":{port}" if port else ""


def lineage_on_complete(
    input_path: str, output_path: str, url_template: str, summary: JobSummary
) -> OperatorLineage[Dataset, RunFacet]:
    """The inputs, outputs and run facet of a completed enrichment task."""
    enriched, dead, requests = summary.enriched, summary.dead_letters, summary.requests_made
    inputs: list[Dataset] = [
        InputDataset(
            *dataset_name(input_path),
            inputFacets={
                "inputStatistics": InputStatisticsInputDatasetFacet(rowCount=summary.records_in)
            },
        ),
        InputDataset(
            *api_dataset(url_template),
            inputFacets={"inputStatistics": InputStatisticsInputDatasetFacet(rowCount=requests)},
        ),
    ]
    outputs = _outputs(output_path, summary)
    facet = EnrichmentRunFacet(
        recordsIn=summary.records_in,
        enriched=enriched,
        deadLetters=dead,
        requestsMade=requests,
        replayedFromSnapshot=summary.replayed_from_snapshot,
        resumed=summary.resumed,
        cost=summary.cost.to_json(),
        runId=summary.run_id,
        result=summary.result,
    )
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets={"enrichment": facet})


def _outputs(output_path: str, summary: JobSummary) -> list[Dataset]:
    """The result and its dead letters: folders, or the tables a run committed to."""
    enriched, dead, table = summary.enriched, summary.dead_letters, summary.table
    if table is None:
        namespace, name = dataset_name(output_path)
        dead_letters = f"{name.rstrip('/')}/{DEAD_LETTERS}"
        return [
            OutputDataset(namespace, name, outputFacets=_rows(enriched)),
            OutputDataset(namespace, dead_letters, outputFacets=_rows(dead)),
        ]
    if table.dead_letters is None:  # inline: every row is in the data table
        return [_table(table.format, table.data, enriched + dead)]
    return [
        _table(table.format, table.data, enriched),
        _table(table.format, table.dead_letters, dead),
    ]


def _table(storage: str, version: TableVersion, rows: int) -> Dataset:
    facets: dict[str, Any] = {
        "storage": StorageDatasetFacet(storageLayer=storage, fileFormat="parquet"),
        "version": DatasetVersionDatasetFacet(datasetVersion=str(version.version)),
    }
    return OutputDataset(*dataset_name(version.uri), facets=facets, outputFacets=_rows(rows))


def _rows(count: int) -> dict[str, Any]:
    return {"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=count)}
