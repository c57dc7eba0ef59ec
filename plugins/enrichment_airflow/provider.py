"""The package's provider metadata (``apache_airflow_provider`` entry point): how
Airflow learns the ``enrichment_api`` connection type, so the UI's connection form and
``airflow connections`` know ``EnrichmentApiHook``. Plugins cannot register hooks;
providers do."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "resumable-enrichment",
        "name": "Resumable enrichment",
        "description": "Resumable API enrichment of batch data on Spark.",
        "connection-types": [
            {
                "hook-class-name": "enrichment_airflow.enrichment_hook.EnrichmentApiHook",
                "connection-type": "enrichment_api",
                "hook-name": "Enrichment API",
            }
        ],
        "hooks": [
            {
                "integration-name": "Resumable enrichment",
                "python-modules": ["enrichment_airflow.enrichment_hook"],
            }
        ],
    }
