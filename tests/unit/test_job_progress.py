"""The driver's progress lines (``spark_jobs/driver/progress.py``) from real manifests in a real
snapshot store, folded into the namespace's progress record as the job does; the clock is
the reporter's own, so rates are exact figures."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest

from spark_jobs.driver.progress import (
    TASKS_END_S,
    ProgressFolder,
    ProgressReporter,
    records_settled,
    settle_quiet_s,
)
from spark_jobs.snapshots import Manifest, NamespaceKey, SnapshotStore

KEY = NamespaceKey("d", "t", "i")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def commit(store: SnapshotStore, partition: int, rows: int, epoch: int) -> None:
    part = store.partition(KEY, partition)
    ref = part.write_segment(pa.table({"id": list(range(rows))}), kind="results", attempt="a")
    part.commit(Manifest("f", partition, epoch, rows, "a", segments=[ref], records_total=1000))


def partition_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("partition")]
    caplog.clear()
    return lines


def test_the_first_line_gives_the_rate_since_start_never_zero(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="enrich_job.progress")
    store, clock = SnapshotStore(str(tmp_path)), Clock()
    commit(store, 0, rows=200, epoch=3)  # resumed: 200 done by an earlier run
    folder = ProgressFolder(store, KEY, "run", partition_count=2, records_total=2000)
    reporter = ProgressReporter(folder, {0: 1000, 1: 1000}, interval=5, clock=clock)
    reporter.baseline()
    commit(store, 0, rows=400, epoch=4)
    commit(store, 1, rows=100, epoch=0)
    clock.now += 10
    reporter.report()
    assert partition_lines(caplog) == [
        "partition 0: 400/1000 (40%), 20 rec/s since start, 0 in flight, epoch 4",
        "partition 1: 100/1000 (10%), 10 rec/s since start, 0 in flight, epoch 0",
    ]
    commit(store, 0, rows=500, epoch=5)
    clock.now += 5
    reporter.report()
    assert partition_lines(caplog) == [
        "partition 0: 500/1000 (50%), 20 rec/s, 0 in flight, epoch 5",
        "partition 1: 100/1000 (10%), 0 rec/s, 0 in flight, epoch 0",
    ]


def test_without_a_starting_point_the_first_line_says_no_rate_yet(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="enrich_job.progress")
    store, clock = SnapshotStore(str(tmp_path)), Clock()
    commit(store, 0, rows=300, epoch=2)
    folder = ProgressFolder(store, KEY, "run", partition_count=1, records_total=1000)
    reporter = ProgressReporter(folder, {0: 1000}, interval=5, clock=clock)
    reporter.report()  # no baseline: its reading failed
    assert partition_lines(caplog) == [
        "partition 0: 300/1000 (30%), no rate yet, 0 in flight, epoch 2"
    ]


def test_every_line_leaves_the_record_the_readers_read(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="enrich_job.progress")
    store, clock = SnapshotStore(str(tmp_path)), Clock()
    folder = ProgressFolder(store, KEY, "run", partition_count=2, records_total=2000)
    reporter = ProgressReporter(folder, {0: 1000, 1: 1000}, interval=5, clock=clock)
    commit(store, 1, rows=100, epoch=0)
    reporter.report()
    record = store.progress_record(KEY)
    assert record is not None and [p.partition for p in record.partitions] == [1]
    assert "progress: epoch 0: 100 of 2 000 records committed, 0 in flight" in caplog.text
    commit(store, 0, rows=400, epoch=4)
    assert reporter.final().done == 500 == store.progress_record(KEY).done


def test_after_a_failed_job_the_record_settles_once_the_last_cuts_stop(tmp_path):
    """No Spark status tracker (absent over Spark Connect): the killed tasks' last cuts
    are waited for on the record itself, which settles once it stops changing."""
    store = SnapshotStore(str(tmp_path))
    folder = ProgressFolder(store, KEY, "run", partition_count=2, records_total=2000)
    clock = Clock()
    late_cuts = iter([(0, 50, 1), (1, 80, 1), (0, 90, 2)])  # a killed task cuts once more

    def sleep(seconds: float) -> None:
        clock.now += seconds
        if (cut := next(late_cuts, None)) is not None:
            commit(store, *cut)

    assert records_settled(folder, quiet_s=2.0, clock=clock, sleep=sleep)
    assert clock.now >= 100 + 3 * 0.5 + 2.0, "settled before the last cut"
    assert {p.partition: p.done_rows for p in folder.refresh().partitions} == {0: 90, 1: 80}


def test_a_record_that_never_settles_gives_up_after_the_timeout(tmp_path):
    store = SnapshotStore(str(tmp_path))
    folder = ProgressFolder(store, KEY, "run", partition_count=1, records_total=1000)
    clock = Clock()
    epochs = iter(range(1, 10_000))

    def sleep(seconds: float) -> None:  # a task that goes on cutting
        clock.now += seconds
        epoch = next(epochs)
        commit(store, 0, epoch, epoch)

    assert not records_settled(folder, quiet_s=2.0, timeout_s=10.0, clock=clock, sleep=sleep)
    assert clock.now == pytest.approx(110.0, abs=0.5)


def test_the_quiet_time_spans_two_snapshot_intervals_within_limits():
    assert settle_quiet_s(10.0) == 20.0
    assert settle_quiet_s(0.1) == 1.0
    assert settle_quiet_s(600.0) == TASKS_END_S


def cut_with_calls(store: SnapshotStore, partition: int, calls: dict, **stats) -> None:
    """A cut of a partition at work in run ``run``, nothing done, two records in flight."""
    stats = {"run_id": "run", "recent_calls": calls, **stats}
    pending = [{"row": 0}, {"row": 1}]
    part = store.partition(KEY, partition)
    part.commit(
        Manifest("f", partition, 0, 2, "a", pending=pending, stats=stats, records_total=1000)
    )


def test_when_nothing_commits_the_line_says_what_the_running_partitions_calls_got(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="enrich_job.progress")
    store = SnapshotStore(str(tmp_path))
    throttled = "429 rate_limit_exceeded"
    cut_with_calls(store, 0, {throttled: 300})
    cut_with_calls(store, 1, {throttled: 180})
    cut_with_calls(store, 2, {"200": 50}, finished=True)  # ended: says nothing of now
    cut_with_calls(store, 3, {"503": 9}, run_id="an earlier run")
    folder = ProgressFolder(store, KEY, "run", partition_count=4, records_total=4000)
    ProgressReporter(folder, dict.fromkeys(range(4), 1000), interval=5).report()
    assert (
        "progress: epoch 0: 0 of 4 000 records committed, 6 in flight; all 480 calls of the "
        "last 60 s answered 429 rate_limit_exceeded; retrying"
    ) in caplog.text
