"""The plugin's web part: snapshot progress page and JSON API (FastAPI), under ``/enrichment``.

``app`` is the FastAPI application the plugin registers as a ``fastapi_apps`` entry;
``URL_PREFIX`` and ``page_url`` come from :mod:`plugins.urls`, which operators and extra
links import without loading the web app.

Import the app as ``from plugins.web import app`` or ``from plugins.web.app import app``:
once this package is imported, the attribute ``plugins.web.app`` is the FastAPI app
itself, not the module of the same name.
"""

from plugins.urls import URL_PREFIX, page_url
from plugins.web.app import app

__all__ = ["URL_PREFIX", "app", "page_url"]
