"""The Airflow plugin: registered through the ``airflow.plugins`` entry point."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from enrichment_airflow.links import SnapshotProgressLink
from enrichment_airflow.urls import URL_PREFIX
from enrichment_airflow.web import app


class ResumableEnrichmentPlugin(AirflowPlugin):
    name = "resumable_enrichment"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Enrichment snapshots"}]
    external_views = [
        {
            "name": "Enrichment snapshots",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            # Shown inside Airflow's UI (at /plugin/enrichment-snapshots), not in a new tab.
            "url_route": "enrichment-snapshots",
        }
    ]
    operator_extra_links = [SnapshotProgressLink()]
