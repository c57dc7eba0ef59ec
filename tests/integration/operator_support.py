"""Shared by the Airflow operator's tests: an operator with the required parameters."""

from __future__ import annotations

from typing import Any

from plugins.enrichment_operator import ResumableEnrichmentOperator


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
