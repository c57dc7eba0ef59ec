"""URLs of the plugin's web view, importable without loading the web app itself
(operators and extra links are imported by every DAG parse)."""

from __future__ import annotations

from urllib.parse import urlencode

URL_PREFIX = "/enrichment"


def page_url(dag_id: str, task_id: str | None = None, interval_start: str | None = None) -> str:
    """Relative URL of the snapshot page filtered to a DAG (and task, and interval)."""
    query = {"dag_id": dag_id, "task_id": task_id, "interval_start": interval_start}
    return f"{URL_PREFIX}/?{urlencode({k: v for k, v in query.items() if v is not None})}"
