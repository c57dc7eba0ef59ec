"""The async wait operator's queues, one suite over both (Flink's StreamElementQueueTest):
capacity owned by ``try_put``, completion through the entry, snapshots in queue order.
Only the ordering itself has a test per queue (Flink's Ordered/UnorderedStreamElementQueueTest).
"""

from __future__ import annotations

import pytest

from spark_jobs.asyncwait import Result, Watermark
from spark_jobs.asyncwait.element_queue import ElementQueue, new_queue
from spark_jobs.asyncwait.ordered_queue import OrderedQueue
from spark_jobs.asyncwait.queue_entry import QueueEntry, RecordEntry, WatermarkEntry
from spark_jobs.asyncwait.unordered_queue import UnorderedQueue


@pytest.fixture(params=["ordered", "unordered"])
def queue(request: pytest.FixtureRequest) -> ElementQueue:
    return new_queue(request.param, capacity=4)


def record(n: int) -> RecordEntry:
    return RecordEntry(n)


def complete(entry: RecordEntry) -> None:
    entry.complete(Result(entry.record, f"v{entry.record}"))


def drain(queue: ElementQueue) -> list[object]:
    """Everything ready now, as records and watermarks."""
    out: list[object] = []
    while (entry := queue.pop_ready()) is not None:
        out.append(entry.watermark if isinstance(entry, WatermarkEntry) else entry.record)
    return out


def test_both_queues_implement_the_protocol(queue: ElementQueue) -> None:
    assert isinstance(queue, ElementQueue)
    assert type(queue) in (OrderedQueue, UnorderedQueue)


def test_put_counts_entries_and_lists_them_in_queue_order(queue: ElementQueue) -> None:
    entries: list[QueueEntry] = [record(0), WatermarkEntry(Watermark(1)), record(2)]
    assert all(queue.try_put(e) for e in entries)
    assert len(queue) == 3 and not queue.full
    assert queue.entries() == entries


def test_try_put_refuses_an_entry_when_full_and_takes_it_once_one_left(
    queue: ElementQueue,
) -> None:
    entries = [record(n) for n in range(4)]
    assert all(queue.try_put(e) for e in entries)
    assert queue.full
    extra = record(4)
    assert queue.try_put(extra) is False
    assert queue.try_put(WatermarkEntry(Watermark(9))) is False  # watermarks take slots too
    assert len(queue) == 4 and extra not in queue.entries()
    complete(entries[0])
    assert drain(queue) == [0]
    assert not queue.full and queue.try_put(extra) is True


def test_nothing_is_ready_until_completed_then_once(queue: ElementQueue) -> None:
    entry = record(0)
    queue.try_put(entry)
    assert queue.pop_ready() is None
    complete(entry)
    assert queue.pop_ready() is entry
    assert queue.pop_ready() is None and len(queue) == 0 and queue.entries() == []


def test_an_entry_restored_complete_is_ready_at_once(queue: ElementQueue) -> None:
    entry = RecordEntry(0, attempts=1, outcome=Result(0, "v0", 1))
    queue.try_put(entry)
    assert queue.pop_ready() is entry


def test_watermarks_alone_leave_in_order(queue: ElementQueue) -> None:
    for t in (1, 2, 3):
        queue.try_put(WatermarkEntry(Watermark(t)))
    assert drain(queue) == [Watermark(1), Watermark(2), Watermark(3)]


def test_no_record_crosses_a_watermark_in_either_direction(queue: ElementQueue) -> None:
    before, after = record(0), record(2)
    for entry in (before, WatermarkEntry(Watermark(1)), after):
        queue.try_put(entry)
    complete(after)
    assert drain(queue) == []  # the watermark waits for 0, and 2 waits for the watermark
    complete(before)
    assert drain(queue) == [0, Watermark(1), 2]


def test_a_snapshot_keeps_queue_order_whatever_left_first(queue: ElementQueue) -> None:
    entries = [record(n) for n in range(3)]
    for entry in entries:
        queue.try_put(entry)
    complete(entries[0])
    complete(entries[2])
    emitted = drain(queue)
    assert emitted in ([0], [0, 2])  # the ordered queue holds 2 back behind 1
    assert [e.record for e in queue.entries()] == [n for n in range(3) if n not in emitted]


def test_ordered_queue_emits_in_input_order() -> None:
    queue = OrderedQueue(capacity=4)
    entries = [record(n) for n in range(3)]
    for entry in entries:
        queue.try_put(entry)
    complete(entries[2])
    complete(entries[1])
    assert drain(queue) == []  # the head (0) holds everything back
    complete(entries[0])
    assert drain(queue) == [0, 1, 2]


def test_unordered_queue_emits_in_completion_order_within_a_segment() -> None:
    queue = UnorderedQueue(capacity=8)
    entries = [record(n) for n in range(3)]
    for entry in entries:
        queue.try_put(entry)
    later = record(4)
    queue.try_put(WatermarkEntry(Watermark(3)))
    queue.try_put(later)
    complete(later)
    complete(entries[2])
    complete(entries[0])
    assert drain(queue) == [2, 0]
    complete(entries[1])
    assert drain(queue) == [1, Watermark(3), 4]


def test_an_unordered_entry_is_bound_to_its_segment_until_complete() -> None:
    """Each entry knows its segment (Flink's SegmentedStreamRecordQueueEntry): completing
    the entry moves it, and no side table maps entries to segments."""
    queue = UnorderedQueue(capacity=4)
    entry = record(0)
    queue.try_put(entry)
    assert entry.segment is not None
    complete(entry)
    assert entry.segment is None and queue.pop_ready() is entry
