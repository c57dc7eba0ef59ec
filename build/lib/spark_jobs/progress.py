"""Progress lines in the driver log while the job runs.

The snapshot store is the progress channel: every partition commits its manifest there,
so the driver polls it rather than collecting metrics from executors.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType

from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.resume import read_progress

logger = logging.getLogger("enrich_job.progress")


class ProgressReporter:
    """A background thread logging per-partition and total progress every ``interval``."""

    def __init__(
        self, store: SnapshotStore, key: NamespaceKey, sizes: dict[int, int], interval: float
    ) -> None:
        self.store, self.key, self.sizes, self.interval = store, key, sizes, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._last: dict[int, tuple[float, int]] = {}

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

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.report()
            except Exception as error:  # progress must never fail the job
                logger.warning("progress unavailable: %s", error)

    def report(self) -> None:
        progress = read_progress(self.store, self.key)
        now = time.monotonic()
        for part in progress.partitions:
            total = self.sizes.get(part.partition, 0)
            before_t, before_done = self._last.get(part.partition, (now, part.done_rows))
            rate = (part.done_rows - before_done) / (now - before_t) if now > before_t else 0.0
            self._last[part.partition] = (now, part.done_rows)
            logger.info(
                "partition %d: %d/%d (%.0f%%), %.0f rec/s, %d in flight, epoch %d",
                part.partition,
                part.done_rows,
                total,
                100 * part.done_rows / max(total, 1),
                rate,
                part.in_flight,
                part.epoch,
            )
        logger.info("progress: %s", progress.describe(sum(self.sizes.values())))
