"""One page of a namespace's partitions: every partition of the job, each in its state.

The progress record has an entry per partition with a commit; the job's partition count
(the driver records it) says which are missing: those are listed as ``pending``, the ones
with manifest files but none valid as ``corrupt``. A page is cut by partition number
(binary search over the record's sorted entries), so a page of a 10 000-partition job costs
the same as one of ten.

A state is one word (what the API's clients match on, and what the page's column shows);
its note is the full text with ages and reasons (the page's tooltip). Both are written here
only: the page's script shows what the API returns, so the HTML and the JSON never
disagree.
"""

from __future__ import annotations

from bisect import bisect_left
from datetime import UTC, datetime

from enrichment_airflow.web.models import PartitionPageView, PartitionView
from spark_jobs.snapshots.progress import PartitionEntry, ProgressRecord, Stall

PENDING_NOTE = "no commit yet: the partition's task has not started or not yet made a cut"
CORRUPT_NOTE = (
    "no valid snapshot: every manifest failed its checks; the next run starts this partition over"
)


def utc(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO 8601 in UTC; None for none or a value out of range."""
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return None


def _ago(committed_at: datetime, now: float) -> str:
    seconds = now - committed_at.timestamp()
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def _state(p: PartitionEntry, running: bool, stall: Stall | None, now: float) -> tuple[str, str]:
    """A committed partition's state, and the full text the page shows as its tooltip."""
    if p.finished:
        return "finished", "every row of the partition is committed"
    if p.budget_exhausted:  # waits for a clear or the next run; not a failure
        return "budget spent", "stopped by --max-requests: the next run resumes it"
    if p.batches_running:  # its records wait in provider batches; a later run reads them
        return "batches running", (
            "its records wait in provider batches still running: the run after they end "
            "reads their rows (a deferred Airflow task does so by itself)"
        )
    if running and stall is not None:
        return "stalled", stall.explain()
    if running:
        return "running", "the run holding the namespace's lease works on it or will"
    return "interrupted", (
        f"interrupted: last commit {_ago(p.committed_at, now)}; no run holds the "
        "namespace, the next run resumes it"
    )


def committed_view(
    p: PartitionEntry, running: bool, stall: Stall | None, now: float
) -> PartitionView:
    state, note = _state(p, running, stall, now)
    return PartitionView(
        partition=p.partition,
        state=state,
        state_note=note,
        epoch=p.epoch,
        input_offset=p.input_offset,
        records_total=p.records_total,
        committed_rows=p.committed_rows,
        dead_letter_rows=p.dead_letter_rows,
        done_rows=p.done_rows,
        in_flight=p.in_flight,
        watermark=p.watermark,
        watermark_utc=utc(p.watermark),
        committed_at=p.committed_at.isoformat(),
        attempt=p.attempt,
        finished=p.finished,
        stats=p.stats,
    )


def uncommitted_view(number: int, state: str, note: str) -> PartitionView:
    """A partition without a valid commit: ``pending`` or ``corrupt``."""
    return PartitionView(
        partition=number,
        state=state,
        state_note=note,
        epoch=None,
        input_offset=None,
        records_total=None,
        committed_rows=0,
        dead_letter_rows=0,
        done_rows=0,
        in_flight=0,
        watermark=None,
        watermark_utc=None,
        committed_at=None,
        attempt=None,
        finished=False,
        stats={},
    )


def partition_count(record: ProgressRecord) -> int:
    """The job's partitions: as recorded, and never fewer than the record names."""
    last = max(
        (record.partitions[-1].partition if record.partitions else -1),
        max(record.corrupt_partitions, default=-1),
    )
    return max(record.partition_count, last + 1)


def partition_page(
    record: ProgressRecord,
    offset: int,
    limit: int,
    running: bool,
    stall: Stall | None,
    now: float,
) -> tuple[list[PartitionView], PartitionPageView]:
    """Partitions ``offset`` to ``offset + limit`` of the job, and which page that is."""
    total = partition_count(record)
    end = min(offset + limit, total)
    entries = record.partitions
    first = bisect_left(entries, offset, key=lambda e: e.partition)
    last = bisect_left(entries, end, key=lambda e: e.partition)
    committed = {e.partition: e for e in entries[first:last]}
    corrupt = set(record.corrupt_partitions)
    views = []
    for number in range(offset, end):
        entry = committed.get(number)
        if entry is not None:
            views.append(committed_view(entry, running, stall, now))
        elif number in corrupt:
            views.append(uncommitted_view(number, "corrupt", CORRUPT_NOTE))
        else:
            views.append(uncommitted_view(number, "pending", PENDING_NOTE))
    return views, PartitionPageView(offset=offset, limit=limit, total=total)
