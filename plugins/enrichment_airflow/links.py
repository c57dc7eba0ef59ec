"""The task instance's link to its snapshot progress page (the plugin's web view)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink, Context

from enrichment_airflow.namespace import namespace_key
from enrichment_airflow.urls import page_url


class SnapshotProgressLink(BaseOperatorLink):
    """ "Snapshot progress": the page filtered to this task run's namespace.

    Airflow 3 computes extra links in the worker when a try ends and keeps them in XCom;
    :meth:`publish` stores it when the try starts, so the button works while it runs.
    """

    name = "Snapshot progress"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        # In the worker ``ti_key`` is the running task instance, which knows its interval.
        if hasattr(ti_key, "get_template_context"):
            key = namespace_key(ti_key.get_template_context())
            return page_url(key.dag_id, key.task_id, key.interval_start)
        return page_url(ti_key.dag_id, ti_key.task_id)

    def publish(self, context: Context) -> None:
        """Store the link for the UI now, rather than when the try ends."""
        ti = context["ti"]
        ti.xcom_push(key=self.xcom_key, value=self.get_link(ti.task, ti_key=ti))
