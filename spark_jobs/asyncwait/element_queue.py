"""The operator's queue interface (Flink's ``StreamElementQueue``) and its two kinds.

The operator never asks which queue it holds: it puts entries while the queue takes them,
emits what the queue says is ready, and snapshots what the queue still holds. The queue
owns its capacity, as Flink's ``tryPut`` does, so the operator does not count.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from .ordered_queue import OrderedQueue
from .queue_entry import QueueEntry
from .unordered_queue import UnorderedQueue


@runtime_checkable
class ElementQueue(Protocol):
    """At most ``capacity`` entries: records in flight or done, and watermarks."""

    capacity: int

    def __len__(self) -> int: ...

    @property
    def full(self) -> bool:
        """No room for another entry: the operator then reads no input (back-pressure)."""
        ...

    def try_put(self, entry: QueueEntry) -> bool:
        """Add ``entry`` unless the queue is full; whether it was added."""
        ...

    def pop_ready(self) -> QueueEntry | None:
        """The next entry its ordering lets out, once complete; ``None`` if there is none."""
        ...

    def entries(self) -> list[QueueEntry]:
        """Every entry still queued, in queue order (for snapshots)."""
        ...


def new_queue(mode: Literal["ordered", "unordered"], capacity: int) -> ElementQueue:
    return OrderedQueue(capacity) if mode == "ordered" else UnorderedQueue(capacity)
