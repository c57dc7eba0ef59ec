"""The run's progress on the driver: the namespace's progress record kept current, and
the progress lines in the driver log.

The snapshot store is the progress channel: every partition commits its manifest there.
Every interval the driver folds every partition's latest commit into the namespace's one
``progress.json`` (``snapshots/progress.py``), logs from it, and leaves it for the Airflow
task's Storage tab and the snapshot page, which read that one record instead of the
manifests. The total's line says what the calls of the last minute were answered when
some were not answered 2xx (``; all 480 calls of the last 60 s answered 429
rate_limit_exceeded; retrying``), so a spent rate limit is not taken for a hung job.

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
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

from spark_jobs.snapshots.contracts import PartitionStats
from spark_jobs.snapshots.paths import NamespaceKey
from spark_jobs.snapshots.progress import (
    CALLS_WINDOW_S,
    MAX_TEXT,
    PartitionEntry,
    PartitionProgress,
    ProgressRecord,
    merge_outcomes,
)
from spark_jobs.snapshots.store import SnapshotStore

record_logger = logging.getLogger(__name__)

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
        batches_running=stats.batches_running,
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
    seconds (recorded, so a reader can tell a run that went silent: ``snapshots/progress.py``);
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
            record_logger.warning("progress record not written: this run no longer holds its lease")
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


logger = logging.getLogger("enrich_job.progress")

#: The longest the driver waits for killed tasks' last cuts after a failed job.
TASKS_END_S = 30.0


class ProgressReporter:
    """A background thread refreshing the progress record and logging per-partition and
    total progress every ``interval``; :meth:`final` is the record once the tasks are done.

    A rate needs two readings: the first line of a partition gives its rate since the
    reporter started (from where it stood then, a resumed partition's earlier work left
    out), later lines the rate since the line before. When the block fails, ``settle``
    runs before the record is written once more (the driver waits there for Spark's
    killed tasks, whose last cut may come after the failure: :func:`records_settled`).
    """

    def __init__(
        self,
        folder: ProgressFolder,
        sizes: dict[int, int],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        settle: Callable[[], object] = lambda: None,
    ) -> None:
        self.folder, self.sizes, self.interval = folder, sizes, interval
        self._settle = settle
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._last: dict[int, tuple[float, int]] = {}
        self._start: tuple[float, dict[int, int]] | None = None

    def __enter__(self) -> ProgressReporter:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        if error is not None:  # where the failed run stopped, for the page and the next try
            try:
                self._settle()  # tasks being killed may still commit their last cut
                self.folder.refresh()
            except Exception as failure:
                logger.warning("progress record not updated: %s", failure)

    def final(self) -> ProgressRecord:
        """The record once every task is done (its last commits read): the summary's counts."""
        return self.folder.refresh()

    def _loop(self) -> None:
        try:
            self.baseline()
        except Exception as error:  # the first lines then say "no rate yet"
            logger.warning("progress unavailable: %s", error)
        while not self._stop.wait(self.interval):
            try:
                self.report()
            except Exception as error:  # progress must never fail the job
                logger.warning("progress unavailable: %s", error)

    def baseline(self) -> None:
        """Where every partition stands now: the first rates are measured from here."""
        progress = self.folder.refresh()
        self._start = (self._clock(), {p.partition: p.done_rows for p in progress.partitions})

    def report(self) -> None:
        progress = self.folder.refresh()
        now = self._clock()
        for part in progress.partitions:
            total = self.sizes.get(part.partition, 0)
            logger.info(
                "partition %d: %d/%d (%.0f%%), %s, %d in flight, epoch %d",
                part.partition,
                part.done_rows,
                total,
                100 * part.done_rows / max(total, 1),
                self._rate(part.partition, part.done_rows, now),
                part.in_flight,
                part.epoch,
            )
        done = progress.describe(sum(self.sizes.values()))
        logger.info("progress: %s%s", done, progress.describe_calls())

    def _rate(self, partition: int, done: int, now: float) -> str:
        """``120 rec/s`` since the last line, ``120 rec/s since start`` on the first one,
        ``no rate yet`` when there is nothing to measure from."""
        before = self._last.get(partition)
        self._last[partition] = (now, done)
        since = ""
        if before is None:
            if self._start is None:
                return "no rate yet"
            before = (self._start[0], self._start[1].get(partition, 0))
            since = " since start"
        elapsed = now - before[0]
        if elapsed <= 0:
            return "no rate yet"
        return f"{(done - before[1]) / elapsed:.0f} rec/s{since}"


def records_settled(
    folder: ProgressFolder,
    quiet_s: float,
    timeout_s: float = TASKS_END_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> bool:
    """Wait until the killed tasks of a failed job have made their last cut, at most
    ``timeout_s``; returns whether the record settled.

    Read from the progress record, not from Spark's status tracker (which needs a
    ``SparkContext``, absent over Spark Connect): the record settles once no partition's
    commit changed for ``quiet_s`` (longer than a snapshot interval: a task still running
    would have cut by then)."""
    deadline = clock() + timeout_s
    seen = folder.refresh().partitions
    quiet_since = clock()
    while clock() - quiet_since < quiet_s:
        if clock() >= deadline:
            return False
        sleep(min(1.0, quiet_s / 4))
        now = folder.refresh().partitions
        if now != seen:
            seen, quiet_since = now, clock()
    return True


def settle_quiet_s(snapshot_interval: float) -> float:
    """How long the record must stay unchanged to count as settled: two snapshot
    intervals (a running task cuts once in each), at least a second, at most
    :data:`TASKS_END_S`."""
    return min(max(2 * snapshot_interval, 1.0), TASKS_END_S)
