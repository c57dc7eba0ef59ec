"""FastAPI dependencies of the web app: the snapshot store and the namespace of a path.

The snapshot root is the Airflow Variable ``enrichment_snapshot_root`` (or
``AIRFLOW_VAR_ENRICHMENT_SNAPSHOT_ROOT``), read on every request; unset means 503.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import Depends, HTTPException, status

from enrichment_airflow.namespace import configured_snapshot_root
from spark_jobs.defaults import SNAPSHOT_ROOT_VARIABLE
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

logger = logging.getLogger(__name__)


def open_store() -> SnapshotStore:
    """The store named by the Variable right now; 503 when unset or unusable."""
    root = configured_snapshot_root()
    if root is None or not str(root).strip():
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"The snapshot store is not configured: set the Airflow Variable "
            f"{SNAPSHOT_ROOT_VARIABLE!r} (or the environment variable "
            f"AIRFLOW_VAR_{SNAPSHOT_ROOT_VARIABLE.upper()}) to its root, "
            "e.g. s3://bucket/snapshots.",
        )
    try:
        return SnapshotStore(str(root).strip())
    except (ValueError, ImportError) as exc:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"The snapshot root in the Airflow Variable {SNAPSHOT_ROOT_VARIABLE!r} "
            f"is not usable: {exc}",
        ) from None


@contextmanager
def storage_errors_as_503() -> Iterator[None]:
    """A storage failure is the API server's problem, not the caller's: 503, details logged."""
    try:
        yield
    except OSError as exc:
        logger.exception("snapshot store unavailable")
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"The snapshot store could not be read ({type(exc).__name__}); see the API server log.",
        ) from None


def namespace_key(dag_id: str, task_id: str, interval_start: str) -> NamespaceKey:
    """The namespace named by the path; 404 when the names cannot be one."""
    try:
        return NamespaceKey(dag_id, task_id, interval_start)
    except ValueError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"No such namespace: {exc}") from None


StoreDep = Annotated[SnapshotStore, Depends(open_store)]
KeyDep = Annotated[NamespaceKey, Depends(namespace_key)]
