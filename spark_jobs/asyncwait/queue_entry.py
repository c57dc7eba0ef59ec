"""Entries of the operator's queue: one per record in flight or waiting to be emitted, and
one per watermark (Flink's ``StreamElementQueueEntry``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .elements import Failure, Result, Watermark


class Segment(Protocol):
    """The part of a queue that holds an entry and must hear of its completion (Flink's
    ``SegmentedStreamRecordQueueEntry`` keeps its segment so no side table is needed)."""

    def completed(self, entry: RecordEntry) -> None: ...


@dataclass(slots=True, eq=False)
class RecordEntry:
    """A record and, once its call is over, its outcome.

    ``attempts`` counts calls that have finished (failed or returned) or were cut by the
    timeout, except throttled ones (``RetryStrategy.is_throttled``), which spend none. A
    call started or about to start (``calling``, which the operator's ``call_capacity``
    counts) is not, so a restored entry always has at least one call left in its budget.
    """

    record: Any
    attempts: int = 0
    calling: bool = False
    outcome: Result | Failure | None = None
    segment: Segment | None = None
    """Set by a queue that must hear of the completion (the unordered one)."""

    @property
    def done(self) -> bool:
        return self.outcome is not None

    def complete(self, outcome: Result | Failure) -> None:
        self.outcome = outcome
        if self.segment is not None:
            self.segment.completed(self)
            self.segment = None


@dataclass(slots=True, eq=False)
class WatermarkEntry:
    """A watermark holds its place in the queue; it is complete from the start."""

    watermark: Watermark
    done: bool = True

    @property
    def outcome(self) -> Watermark:
        return self.watermark


QueueEntry = RecordEntry | WatermarkEntry
