"""Where a task instance's snapshots live: one namespace per (dag, task, data interval).

Scheduled runs, backfills and manual clears of the same data interval resolve to the same
namespace, so each resumes where the last try stopped; a mapped task gets one per index.
"""

from __future__ import annotations

from airflow.sdk import Context, Variable

from spark_jobs.defaults import SNAPSHOT_ROOT_VARIABLE
from spark_jobs.snapshots import NamespaceKey


def namespace_key(context: Context) -> NamespaceKey:
    ti = context["ti"]
    task_id = (
        ti.task_id if ti.map_index is None or ti.map_index < 0 else f"{ti.task_id}.{ti.map_index}"
    )
    return NamespaceKey(ti.dag_id, task_id, interval_start(context))


def interval_start(context: Context) -> str:
    """The run's data interval start, or its logical date for a run without an interval
    (an Asset-triggered one): the namespace's interval component."""
    start = context["data_interval_start"] or context["logical_date"]
    return start.isoformat()


def configured_snapshot_root() -> str | None:
    """The ``enrichment_snapshot_root`` Variable (or ``AIRFLOW_VAR_*``), None when unset.
    The Task SDK's ``Variable`` reads it in tasks and in the API server alike."""
    root: str | None = Variable.get(SNAPSHOT_ROOT_VARIABLE, default=None)
    return root


def snapshot_root(explicit: str | None) -> str:
    """The operator's ``snapshot_root``, else the ``enrichment_snapshot_root`` Variable."""
    root = explicit or configured_snapshot_root()
    if not root:
        raise ValueError(
            "no snapshot root: pass snapshot_root= or set the Airflow Variable "
            f"{SNAPSHOT_ROOT_VARIABLE} (e.g. AIRFLOW_VAR_ENRICHMENT_SNAPSHOT_ROOT=s3://bucket/snaps)"
        )
    return root
