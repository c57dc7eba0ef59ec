"""The progress line the Airflow operator writes to its task's "Task State Store" tab,
from the progress record the driver folds from real manifests in a real snapshot store
(the state store is a recording stand-in: Airflow's accessor needs a running task
supervisor; the browser test sees the real one)."""

from __future__ import annotations

import pyarrow as pa

from enrichment_airflow.progress_reporter import PROGRESS_KEY, progress_line, reporting_progress
from spark_jobs.driver.progress import ProgressFolder
from spark_jobs.records.completion import CompletionRecord
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import Manifest, NamespaceKey, SnapshotStore

KEY = NamespaceKey("enrich_customers", "enrich", "2024-01-01T00:00:00+00:00")


class RecordingStateStore:
    def __init__(self) -> None:
        self.values: list[str] = []

    def set(self, key: str, value: str) -> None:
        assert key == PROGRESS_KEY
        self.values.append(value)


def commit(store: SnapshotStore, partition: int, rows: int, epoch: int, total: int) -> None:
    part = store.partition(KEY, partition)
    ref = part.write_segment(pa.table({"id": list(range(rows))}), kind="results", attempt="a")
    part.commit(
        Manifest(
            job_fingerprint="f",
            partition=partition,
            epoch=epoch,
            input_offset=rows + 2,
            attempt="a",
            pending=[{"row": rows}, {"row": rows + 1}],
            segments=[ref],
            records_total=total,
            stats={},
        )
    )


def test_progress_line_counts_committed_records_of_every_partition(tmp_path):
    store = SnapshotStore(str(tmp_path))
    driver = ProgressFolder(store, KEY, "run", partition_count=2, records_total=100_000)
    assert progress_line(store, KEY) is None  # the driver has written nothing yet
    driver.refresh()
    assert progress_line(store, KEY) is None  # nothing committed yet
    commit(store, 0, rows=1200, epoch=3, total=50_000)
    assert progress_line(store, KEY) is None, "read from the record, not the manifests"
    driver.refresh()
    assert progress_line(store, KEY) == "1 200 / 100 000 committed, epoch 3, 2 in flight"
    commit(store, 1, rows=47_013, epoch=12, total=50_000)
    driver.refresh()
    assert progress_line(store, KEY) == "48 213 / 100 000 committed, epoch 12, 4 in flight"


def test_without_the_drivers_count_the_total_is_unknown(tmp_path):
    store = SnapshotStore(str(tmp_path))
    commit(store, 0, rows=1200, epoch=3, total=50_000)
    ProgressFolder(store, KEY, "run", partition_count=2, records_total=None).refresh()
    assert progress_line(store, KEY) == "1 200 / ? committed, epoch 3, 2 in flight"


def test_the_published_count_replaces_the_snapshots(tmp_path):
    store = SnapshotStore(str(tmp_path))
    commit(store, 0, rows=10, epoch=1, total=12)
    summary = JobSummary(records_in=12, enriched=11, dead_letters=1)
    store.mark_completed(KEY, CompletionRecord("fp", "run", summary))
    assert progress_line(store, KEY) == "12 / 12 done (1 dead letters), output published"


def test_reporting_writes_where_it_starts_and_where_it_ends(tmp_path):
    store = SnapshotStore(str(tmp_path))
    driver = ProgressFolder(store, KEY, "run", partition_count=1, records_total=100)
    commit(store, 0, rows=5, epoch=1, total=100)
    driver.refresh()
    state = RecordingStateStore()
    with reporting_progress({"task_state_store": state}, store, KEY):
        commit(store, 0, rows=60, epoch=4, total=100)
        driver.refresh()
    assert state.values == [
        "5 / 100 committed, epoch 1, 2 in flight",
        "60 / 100 committed, epoch 4, 2 in flight",
    ]


def test_without_a_task_state_store_nothing_is_reported(tmp_path):
    with reporting_progress({}, SnapshotStore(str(tmp_path)), KEY):
        pass
