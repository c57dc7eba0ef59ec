"""What one Spark task knows about its partition."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PartitionTask:
    """The partition, this attempt of it, and the job and run it belongs to."""

    partition: int
    attempt: str
    records_total: int | None
    fingerprint: str
    run_id: str = "run"
    """The spark-submit this attempt belongs to: the request budget is per run."""
