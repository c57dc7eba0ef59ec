"""Unordered queue (Flink's ``UnorderedStreamElementQueue``): completion order within
watermark boundaries.

The queue is a chain of segments. A record segment collects the records between two
watermarks; its completed records may leave in any order. A watermark is a segment of its
own and leaves only when everything before it has left, so no record crosses a watermark
in either direction. Without watermarks there is one segment and the queue is purely
completion-ordered.
"""

from __future__ import annotations

from collections import deque

from .queue_entry import QueueEntry, RecordEntry, WatermarkEntry


class _RecordSegment:
    __slots__ = ("completed", "incomplete")

    def __init__(self) -> None:
        self.incomplete: set[RecordEntry] = set()
        self.completed: deque[RecordEntry] = deque()

    def __len__(self) -> int:
        return len(self.incomplete) + len(self.completed)


class UnorderedQueue:
    def __init__(self) -> None:
        self._segments: deque[_RecordSegment | WatermarkEntry] = deque()
        self._segment_of: dict[RecordEntry, _RecordSegment] = {}
        # Insertion-ordered, so a snapshot lists entries in queue order.
        self._all: dict[QueueEntry, None] = {}

    def __len__(self) -> int:
        return len(self._all)

    def add(self, entry: QueueEntry) -> None:
        self._all[entry] = None
        if isinstance(entry, WatermarkEntry):
            self._segments.append(entry)
            return
        if not self._segments or isinstance(self._segments[-1], WatermarkEntry):
            self._segments.append(_RecordSegment())
        segment = self._segments[-1]
        assert isinstance(segment, _RecordSegment)
        if entry.done:
            segment.completed.append(entry)
        else:
            segment.incomplete.add(entry)
            self._segment_of[entry] = segment

    def completed(self, entry: RecordEntry) -> None:
        """Move a record to its segment's completed list, where it may be emitted."""
        segment = self._segment_of.pop(entry, None)
        if segment is not None:
            segment.incomplete.discard(entry)
            segment.completed.append(entry)

    def pop_ready(self) -> QueueEntry | None:
        """A completed record of the first segment, or the watermark at the head."""
        while self._segments:
            head = self._segments[0]
            if isinstance(head, WatermarkEntry):
                self._segments.popleft()
                del self._all[head]
                return head
            if head.completed:
                entry = head.completed.popleft()
                del self._all[entry]
                return entry
            if head.incomplete or len(self._segments) == 1:
                return None
            self._segments.popleft()  # an emptied segment in front of a watermark
        return None

    def entries(self) -> list[QueueEntry]:
        """Every entry still queued, in insertion order (for snapshots)."""
        return list(self._all)
