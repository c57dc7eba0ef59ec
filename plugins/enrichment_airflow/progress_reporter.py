"""A running enrichment's progress where Airflow users look: the task's *Task State Store*.

Airflow 3.3 shows, on a task instance's page, a "Task State Store" tab with the key/value
pairs the task wrote through ``context["task_state_store"]`` (Task SDK, kept across tries
and after success). While ``spark-submit`` runs, a background thread reads the namespace's
progress record (``progress.json``, which the job's driver keeps current: one small GET,
never a scan of manifests) and writes one line there every few seconds:

    progress: 48 213 / 100 000 committed, epoch 12, 64 in flight

with ``; no progress for 45 s`` once the run has sent neither a commit nor a lease
renewal for over twice their intervals (``spark_jobs/snapshots/progress.py``: a driver lost
with its machine while ``spark-submit`` still waits on it), and, once the job published,
the final count from its completion record. Nothing else in
Airflow's own views can show a figure that changes while a task runs: the task instance
note is not writable from a task (no Execution API route), an extra link's name is fixed
per operator class, and XCom is written only when ``execute`` returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from spark_jobs.records.values import format_count
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.progress import stall_of

if TYPE_CHECKING:  # the web view imports this module too: no Airflow import at run time
    from airflow.sdk import Context

logger = logging.getLogger(__name__)

#: The Task State Store key the line is written under.
PROGRESS_KEY = "progress"
#: Seconds between two readings of the progress record.
INTERVAL_S = 5.0


class StateStore(Protocol):
    """What is used of Airflow's ``TaskStateStoreAccessor``."""

    def set(self, key: str, value: Any) -> None: ...


def progress_line(store: SnapshotStore, key: NamespaceKey, now: float | None = None) -> str | None:
    """``"48 213 / 100 000 committed, epoch 12, 64 in flight"`` from the progress record
    (and ``"; no progress for 45 s"`` when the run went silent by ``now``, Unix time), the
    final count once the run published, or None before the driver wrote a record with a
    commit in it. At most two GETs: the record and the lease, else the completion record."""
    record = store.progress_record(key)
    if record is not None:
        stall = stall_of(
            record, store.lease(key, owner="").read(), time.time() if now is None else now
        )
        silent = "" if stall is None else f"; {stall.describe()}"
        if not record.partitions:
            return stall.describe() if stall is not None else None
        return (
            f"{format_count(record.done)} / {format_count(record.records_total)} committed, "
            f"epoch {record.epoch}, {record.in_flight} in flight{silent}"
        )
    completed = store.read_completed(key)
    if completed is not None and completed.summary is not None:
        return completed.summary.describe_published()
    return None


class _Reporter(threading.Thread):
    def __init__(self, state: StateStore, store: SnapshotStore, key: NamespaceKey) -> None:
        super().__init__(name="enrichment-progress", daemon=True)
        self.state, self.store, self.key = state, store, key
        self.stopped = threading.Event()
        self.last: str | None = None

    def report(self) -> None:
        try:
            line = progress_line(self.store, self.key)
            if line is not None and line != self.last:
                self.state.set(PROGRESS_KEY, line)
                self.last = line
        except Exception:  # progress is a courtesy: it never fails the task
            logger.warning("could not report enrichment progress", exc_info=True)

    def run(self) -> None:
        while not self.stopped.wait(INTERVAL_S):
            self.report()


def report_progress(context: Context, store: SnapshotStore, key: NamespaceKey) -> None:
    """Write the namespace's progress line once (a deferred task, when it defers and
    when it resumes: the triggerer cannot write the task state store)."""
    state = context.get("task_state_store")
    if state is not None:
        _Reporter(state, store, key).report()


@contextmanager
def reporting_progress(context: Context, store: SnapshotStore, key: NamespaceKey) -> Iterator[None]:
    """Report the namespace's progress to the task's state store while the block runs,
    and once more after it (the published count, or where a failed try stopped)."""
    state = context.get("task_state_store")
    if state is None:  # not run by the Task SDK (e.g. an operator called directly)
        yield
        return
    reporter = _Reporter(state, store, key)
    reporter.report()  # where a resumed try starts from
    reporter.start()
    try:
        yield
    finally:
        reporter.stopped.set()
        reporter.join()
        reporter.report()
