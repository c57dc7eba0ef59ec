"""Shared by the Airflow operator's tests: an operator with the required parameters."""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from enrichment_airflow.enrichment_operator import ResumableEnrichmentOperator


def enrichment_operator(**overrides: Any) -> ResumableEnrichmentOperator:
    settings = {
        "task_id": "enrich",
        "input_path": "in",
        "output_path": "out",
        "key_column": "id",
        "url_path": "/customers/{id}",
        "response_fields": {"name": "$.name"},
        **overrides,
    }
    return ResumableEnrichmentOperator(**settings)


def submit_hook(operator: ResumableEnrichmentOperator) -> SparkSubmitHook:
    """The Spark provider's hook as the operator's ``execute`` has it built: the job's
    needs added to the provider's arguments, then the provider's own ``_get_hook``."""
    operator.prepare_submit()
    return operator._get_hook()
