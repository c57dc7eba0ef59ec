"""Unordered queue (Flink's ``UnorderedStreamElementQueue``): completion order within
watermark boundaries.

The queue is a chain of segments. A record segment collects the records between two
watermarks; its completed records may leave in any order. A watermark is a segment of its
own and leaves only when everything before it has left, so no record crosses a watermark
in either direction. Without watermarks there is one segment and the queue is purely
completion-ordered. A record not yet complete is bound to its segment, which its
completion notifies (``RecordEntry.complete``).
"""

from __future__ import annotations

from collections import deque

from .queue_entry import QueueEntry, RecordEntry, WatermarkEntry


class _RecordSegment:
    __slots__ = ("completed_entries", "incomplete")

    def __init__(self) -> None:
        self.incomplete: set[RecordEntry] = set()
        self.completed_entries: deque[RecordEntry] = deque()

    def completed(self, entry: RecordEntry) -> None:
        """Move a record to the completed list, where it may be emitted."""
        self.incomplete.discard(entry)
        self.completed_entries.append(entry)


class UnorderedQueue:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._segments: deque[_RecordSegment | WatermarkEntry] = deque()
        # Insertion-ordered, so a snapshot lists entries in queue order.
        self._all: dict[QueueEntry, None] = {}

    def __len__(self) -> int:
        return len(self._all)

    @property
    def full(self) -> bool:
        return len(self._all) >= self.capacity

    def try_put(self, entry: QueueEntry) -> bool:
        if len(self._all) >= self.capacity:
            return False
        self._all[entry] = None
        if isinstance(entry, WatermarkEntry):
            self._segments.append(entry)
            return True
        if not self._segments or isinstance(self._segments[-1], WatermarkEntry):
            self._segments.append(_RecordSegment())
        segment = self._segments[-1]
        assert isinstance(segment, _RecordSegment)
        if entry.done:
            segment.completed_entries.append(entry)
        else:
            segment.incomplete.add(entry)
            entry.segment = segment
        return True

    def pop_ready(self) -> QueueEntry | None:
        """A completed record of the first segment, or the watermark at the head."""
        while self._segments:
            head = self._segments[0]
            if isinstance(head, WatermarkEntry):
                self._segments.popleft()
                del self._all[head]
                return head
            if head.completed_entries:
                entry = head.completed_entries.popleft()
                del self._all[entry]
                return entry
            if head.incomplete or len(self._segments) == 1:
                return None
            self._segments.popleft()  # an emptied segment in front of a watermark
        return None

    def entries(self) -> list[QueueEntry]:
        """Every entry still queued, in insertion order (for snapshots)."""
        return list(self._all)
