"""Ordered queue (Flink's ``OrderedStreamElementQueue``): output order is input order.

The head is emitted once it is complete, so one slow record holds back everything queued
behind it: the price of order. Watermarks are entries like any other.
"""

from __future__ import annotations

from collections import deque

from .queue_entry import QueueEntry, RecordEntry


class OrderedQueue:
    def __init__(self) -> None:
        self._entries: deque[QueueEntry] = deque()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, entry: QueueEntry) -> None:
        self._entries.append(entry)

    def completed(self, entry: RecordEntry) -> None:
        """Nothing to move: the head is checked when the operator asks for output."""

    def pop_ready(self) -> QueueEntry | None:
        """The head if it is complete, else ``None``."""
        if self._entries and self._entries[0].done:
            return self._entries.popleft()
        return None

    def entries(self) -> list[QueueEntry]:
        """Every entry still queued, in queue order (for snapshots)."""
        return list(self._entries)
