"""Progress of stored snapshots read from their manifests, as the store, the resume
decision (when a namespace has no progress record) and the demo see it.

Plain data: it knows nothing of the store that found them, so the store can return it
without an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .contracts import PartitionStats
from .manifest import Manifest
from .paths import NamespaceKey
from .progress_record import describe_progress


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
    """The manifest's stats as stored; :attr:`partition_stats` reads them typed."""

    @property
    def partition_stats(self) -> PartitionStats:
        return PartitionStats.from_json(self.stats)

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
    """One task run found under the store root, with per-partition progress from their
    best manifests, and its totals (what ``progress_record.ProgressRecord`` says of a
    namespace, for one without a record: a run of an older version)."""

    key: NamespaceKey
    partitions: tuple[PartitionProgress, ...]

    @property
    def epoch(self) -> int:
        return max((p.epoch for p in self.partitions), default=0)

    @property
    def done(self) -> int:
        return sum(p.done_rows for p in self.partitions)

    @property
    def in_flight(self) -> int:
        return sum(p.in_flight for p in self.partitions if not p.partition_stats.finished)

    def describe(self, records_total: int | None) -> str:
        return describe_progress(self.epoch, self.done, self.in_flight, records_total)
