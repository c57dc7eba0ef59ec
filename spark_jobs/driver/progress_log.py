"""Progress lines in the driver log while the job runs, and the namespace's progress record.

The snapshot store is the progress channel: every partition commits its manifest there.
Every interval the driver folds what changed into the namespace's ``progress.json``
(``snapshots/namespace_progress.py``), logs from it, and leaves it for the Airflow task's
Storage tab and the snapshot page, which read that one record instead of the manifests.
The total's line says what the calls of the last minute were answered when some were not
answered 2xx (``; all 480 calls of the last 60 s answered 429 rate_limit_exceeded;
retrying``), so a spent rate limit is not taken for a hung job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from spark_jobs.snapshots.namespace_progress import ProgressFolder
from spark_jobs.snapshots.progress_record import ProgressRecord

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
