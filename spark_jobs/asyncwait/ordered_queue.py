"""Ordered queue (Flink's ``OrderedStreamElementQueue``): output order is input order.

The head is emitted once it is complete, so one slow record holds back everything queued
behind it: the price of order. Watermarks are entries like any other.
"""

from __future__ import annotations

from collections import deque

from .queue_entry import QueueEntry


class OrderedQueue:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: deque[QueueEntry] = deque()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def full(self) -> bool:
        return len(self._entries) >= self.capacity

    def try_put(self, entry: QueueEntry) -> bool:
        if len(self._entries) >= self.capacity:
            return False
        self._entries.append(entry)
        return True

    def pop_ready(self) -> QueueEntry | None:
        """The head if it is complete, else ``None``."""
        if self._entries and self._entries[0].done:
            return self._entries.popleft()
        return None

    def entries(self) -> list[QueueEntry]:
        return list(self._entries)
