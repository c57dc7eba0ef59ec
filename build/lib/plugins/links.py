"""The task instance's link to its snapshot progress page (the plugin's web view)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

from plugins.urls import page_url


class SnapshotProgressLink(BaseOperatorLink):
    name = "Snapshot progress"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return page_url(ti_key.dag_id, ti_key.task_id)
