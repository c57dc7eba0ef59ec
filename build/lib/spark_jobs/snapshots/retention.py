"""Admin views of stored snapshots and the post-success cleanup helper.

Snapshots exist only to resume a failed task run; once the run succeeded they are dead
weight, and namespaces of runs that were abandoned must be findable to be discarded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .manifest import Manifest
from .paths import NamespaceKey

if TYPE_CHECKING:
    from .store import SnapshotStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionProgress:
    """Progress of one partition according to its best valid manifest."""

    partition: int
    epoch: int
    input_offset: int
    records_total: int | None
    committed_rows: int
    dead_letter_rows: int
    watermark: int | None
    committed_at: datetime
    attempt: str
    in_flight: int = 0
    """Pending operator entries at the cut: requested again (or replayed) on resume."""
    stats: Mapping[str, Any] = field(default_factory=dict)

    @property
    def done_rows(self) -> int:
        """Records with a committed outcome: enriched or dead letter."""
        return self.committed_rows + self.dead_letter_rows

    @classmethod
    def of(cls, manifest: Manifest) -> PartitionProgress:
        if manifest.committed_at is None:
            raise ValueError("only committed manifests have progress")
        return cls(
            partition=manifest.partition,
            epoch=manifest.epoch,
            input_offset=manifest.input_offset,
            records_total=manifest.records_total,
            committed_rows=manifest.committed_rows,
            dead_letter_rows=manifest.dead_letter_rows,
            watermark=manifest.watermark,
            committed_at=manifest.committed_at,
            attempt=manifest.attempt,
            in_flight=len(manifest.pending),
            stats=dict(manifest.stats),
        )


@dataclass(frozen=True)
class NamespaceInfo:
    """One task run found under the store root, with per-partition progress."""

    key: NamespaceKey
    partitions: tuple[PartitionProgress, ...]


def delete_after_success(store: SnapshotStore, key: NamespaceKey) -> bool:
    """Discard a task run's snapshots once the run succeeded and its output is durable.

    Call it only after the output commit (e.g. from the Airflow task after spark-submit
    returned 0): before that, the snapshots are the only way to resume.  Idempotent, so
    a retried success callback is harmless.  Returns whether anything was deleted.
    """
    progress = store.namespace_progress(key)
    deleted = store.discard(key)
    if deleted:
        logger.info(
            "discarded snapshots of %s/%s/%s after success (%d partitions, %d result rows)",
            key.dag_id,
            key.task_id,
            key.interval_start,
            len(progress),
            sum(p.committed_rows for p in progress),
        )
    return deleted
