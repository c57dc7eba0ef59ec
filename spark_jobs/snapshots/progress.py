"""Progress of stored snapshots, as the store, the resume decision and the admin views see it.

Plain data read from manifests: it knows nothing of the store that found them, so the
store can return it without an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .manifest import Manifest


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
