"""The plugin's web part: snapshot progress page and JSON API (FastAPI), under ``/enrichment``.

``app`` is the FastAPI application the plugin registers as a ``fastapi_apps`` entry;
``URL_PREFIX`` and ``page_url`` come from :mod:`enrichment_airflow.urls`, which operators
and extra links import without loading the web app.

Import the app as ``from enrichment_airflow.web import app`` or
``from enrichment_airflow.web.app import app``: once this package is imported, the
attribute ``enrichment_airflow.web.app`` is the FastAPI app itself, not the module of the
same name.
"""

from enrichment_airflow.urls import URL_PREFIX, page_url
from enrichment_airflow.web.app import app

__all__ = ["URL_PREFIX", "app", "page_url"]
