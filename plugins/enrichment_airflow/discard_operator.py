"""Force a fresh start: delete a task run's snapshot namespace."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator, Context

from enrichment_airflow.namespace import interval_start, snapshot_root
from spark_jobs.snapshots import NamespaceKey, SnapshotStore


class DiscardSnapshotsOperator(BaseOperator):
    """Discard the snapshots of ``target_task_id`` for this DAG run's data interval (or
    ``interval_start``), so its next run starts from zero.

    :param target_task_id: the enrichment task whose snapshots go (templated).
    :param interval_start: the data interval start of the namespace, ISO 8601; empty for
        this DAG run's (templated).
    :param snapshot_root: where snapshots live (any fsspec URL); empty for the
        ``enrichment_snapshot_root`` Variable (templated).
    """

    template_fields = ("target_task_id", "interval_start", "snapshot_root")

    def __init__(
        self,
        *,
        target_task_id: str,
        interval_start: str | None = None,
        snapshot_root: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target_task_id = target_task_id
        self.interval_start = interval_start
        self.snapshot_root = snapshot_root

    def execute(self, context: Context) -> bool:
        interval = self.interval_start or interval_start(context)
        key = NamespaceKey(context["ti"].dag_id, self.target_task_id, interval)
        store = SnapshotStore(snapshot_root(self.snapshot_root))
        discarded = store.discard(key)
        self.log.info(
            "%s snapshots of %s",
            "discarded" if discarded else "found no",
            store.namespace_path(key),
        )
        return discarded
