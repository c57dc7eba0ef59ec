"""Entries of the operator's queue: one per record in flight or waiting to be emitted, and
one per watermark (Flink's ``StreamElementQueueEntry``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .elements import Failure, Result, Watermark


@dataclass(slots=True, eq=False)
class RecordEntry:
    """A record and, once its call is over, its outcome.

    ``attempts`` counts calls that have finished (failed or returned) or were cut by the
    timeout; a call in flight (``calling``) is not counted, so a restored entry always has
    at least one call left in its budget.
    """

    record: Any
    attempts: int = 0
    calling: bool = False
    outcome: Result | Failure | None = None
    enqueued_at: float = 0.0

    @property
    def done(self) -> bool:
        return self.outcome is not None


@dataclass(slots=True, eq=False)
class WatermarkEntry:
    """A watermark holds its place in the queue; it is complete from the start."""

    watermark: Watermark
    enqueued_at: float = 0.0
    done: bool = True

    @property
    def outcome(self) -> Watermark:
        return self.watermark


QueueEntry = RecordEntry | WatermarkEntry
