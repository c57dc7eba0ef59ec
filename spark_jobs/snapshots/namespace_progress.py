"""The driver's side of the progress record: fold every partition's latest commit into one
``progress.json`` (``progress_record.py``) and keep it current.

Incremental: a partition whose task in this run has ended (finished, or stopped by its
budget or a systemic failure) is read once more after that and never again; the others
through their latest commit (``PartitionSnapshots.latest``), a few at a time in threads,
since each is a round trip or two to the storage. Partitions without a directory have
not started and cost nothing beyond the one listing of the namespace.

The record's ``recent_calls`` add up what the partitions still at work in this run last
cut of their calls, a cut at most a minute old: a task that died or ended says nothing
of the calls now.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from .contracts import PartitionStats
from .manifest_progress import PartitionProgress
from .paths import NamespaceKey
from .progress_record import (
    CALLS_WINDOW_S,
    MAX_TEXT,
    PartitionEntry,
    ProgressRecord,
    merge_outcomes,
)
from .store import SnapshotStore

logger = logging.getLogger(__name__)

#: Partitions read at once by a refresh (each read waits on the storage, not the CPU).
READ_THREADS = 8


def _text(value: object) -> str:
    return str(value)[:MAX_TEXT]


def entry_of(progress: PartitionProgress) -> PartitionEntry:
    """A partition's entry from its best manifest's progress (its stats as the runner
    wrote them: ``partition_runner/stats.py``)."""
    stats = PartitionStats.from_json(progress.stats)
    reason = stats.systemic_failure
    return PartitionEntry(
        partition=progress.partition,
        epoch=progress.epoch,
        input_offset=progress.input_offset,
        records_total=progress.records_total,
        committed_rows=progress.committed_rows,
        dead_letter_rows=progress.dead_letter_rows,
        in_flight=progress.in_flight,
        watermark=progress.watermark,
        committed_at_ms=int(progress.committed_at.timestamp() * 1000),
        attempt=_text(progress.attempt),
        run_id=_text(stats.run_id),
        finished=stats.finished,
        budget_exhausted=stats.budget_exhausted,
        systemic_failure=_text(reason) if reason else None,
        resumed=stats.resumed,
        requests_made=stats.requests_made,
        response_cache_hits=stats.counter("response_cache_hits"),
        coalesced_calls=stats.counter("coalesced_calls"),
        cache_hits=stats.counter("cache_hits"),
        replayed=stats.replayed,
        rss_mb_peak=stats.rss_mb_peak if stats.rss_mb_peak < 1e12 else 0.0,
    )


class ProgressFolder:
    """Keeps ``progress.json`` of one namespace current for the run ``run_id``.

    ``partition_count`` and ``records_total`` are the job's (the driver counted the
    input), ``intervals`` its ``--snapshot-interval`` and ``--progress-interval`` in
    seconds (recorded, so a reader can tell a run that went silent: ``stall.py``);
    :meth:`refresh` reads what changed, writes the record and returns it. Used from one
    thread at a time (the driver's progress thread, then the driver itself). ``holds``
    (the run's lease) is asked before each write: a run fenced off writes no progress
    over its successor's.
    """

    def __init__(
        self,
        store: SnapshotStore,
        key: NamespaceKey,
        run_id: str,
        partition_count: int,
        records_total: int | None,
        holds: Callable[[], bool] = lambda: True,
        intervals: tuple[float, float] | None = None,
    ) -> None:
        self.store, self.key, self.run_id, self.holds = store, key, run_id, holds
        self.partition_count, self.records_total = partition_count, records_total
        ms: list[int | None] = [round(s * 1000) for s in intervals] if intervals else [None, None]
        self._snapshot_ms, self._progress_ms = ms
        self._entries: dict[int, PartitionEntry] = {}
        self._calls: dict[int, Mapping[str, int]] = {}  # each entry's recent_calls
        self._corrupt: set[int] = set()

    def refresh(self) -> ProgressRecord:
        """Read the partitions that may have changed, then write and return the record."""
        numbers = [
            number
            for number in self.store.partitions(self.key)
            if number < self.partition_count  # others are no partition of this job's
            and not (number in self._entries and self._entries[number].settled(self.run_id))
        ]
        with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="progress-read") as pool:
            found = list(pool.map(self._read, numbers))
        for number, entry in zip(numbers, found, strict=True):
            if isinstance(entry, tuple):
                self._entries[number], self._calls[number] = entry
                self._corrupt.discard(number)
                continue
            self._entries.pop(number, None)
            self._calls.pop(number, None)
            if entry:  # manifest files, not one of them valid
                self._corrupt.add(number)
        now_ms = int(time.time() * 1000)
        record = ProgressRecord(
            run_id=_text(self.run_id),
            written_at_ms=now_ms,
            partition_count=self.partition_count,
            records_total=self.records_total,
            partitions=tuple(self._entries[n] for n in sorted(self._entries)),
            corrupt_partitions=tuple(sorted(self._corrupt)),
            snapshot_interval_ms=self._snapshot_ms,
            progress_interval_ms=self._progress_ms,
            recent_calls=self._recent_calls(now_ms),
        )
        if self.holds():
            self.store.write_progress_record(self.key, record)
        else:
            logger.warning("progress record not written: this run no longer holds its lease")
        return record

    def _recent_calls(self, now_ms: int) -> dict[str, int]:
        """The calls by outcome of the partitions at work in this run, recently cut."""
        since_ms = now_ms - CALLS_WINDOW_S * 1000
        return merge_outcomes(
            self._calls[number]
            for number, entry in self._entries.items()
            if entry.run_id == self.run_id
            and not entry.settled(self.run_id)
            and entry.committed_at_ms >= since_ms
        )

    def _read(self, number: int) -> tuple[PartitionEntry, Mapping[str, int]] | bool:
        """The partition's entry and its recent calls; without a valid manifest, whether
        it has manifest files (corrupt) or none yet (not committed)."""
        snapshots = self.store.partition(self.key, number)
        manifest = snapshots.latest(verify_content=False)
        if manifest is None:
            return snapshots.has_manifest_files()
        progress = PartitionProgress.of(manifest)
        return entry_of(progress), progress.partition_stats.recent_calls
