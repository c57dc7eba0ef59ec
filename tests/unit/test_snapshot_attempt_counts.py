"""Attempt records on a real local store: one file per attempt, rewritten in place,
never confused with another attempt's, and a damaged one reported rather than trusted."""

from __future__ import annotations

import pytest

from spark_jobs.snapshots import AttemptCounts, NamespaceKey, SnapshotStore

KEY = NamespaceKey("d", "t", "2026-11-20T00:00:00+00:00")


def test_each_attempt_keeps_one_record_however_often_it_writes(tmp_path) -> None:
    store = SnapshotStore(str(tmp_path))
    ledger = store.partition(KEY, 3).attempt_ledger()
    first = ledger.recorder(3, "s1-t5-a0", "run1")
    again = ledger.recorder(3, "s1-t5-a0", "run2")  # Spark's ids repeat in another run
    for made in (0, 4, 9):
        first.write({"requests_made": made}, final=False)
    again.write({"requests_made": 2}, final=True)
    reading = store.attempt_counts(KEY)
    assert reading.unreadable == 0
    assert sorted(reading.records, key=lambda r: r.run_id) == [
        AttemptCounts(3, "s1-t5-a0", "run1", {"requests_made": 9}, final=False),
        AttemptCounts(3, "s1-t5-a0", "run2", {"requests_made": 2}, final=True),
    ]
    assert len(list((tmp_path / "d").rglob("attempts/*.json"))) == 2


def test_a_damaged_record_is_counted_as_unreadable(tmp_path) -> None:
    store = SnapshotStore(str(tmp_path))
    recorder = store.partition(KEY, 0).attempt_ledger().recorder(0, "a0", "run")
    recorder.write({"requests_made": 5}, final=True)
    (path,) = (tmp_path / "d").rglob("attempts/*.json")
    path.write_text('{"partition": 0, "attempt": "a0"')
    reading = store.attempt_counts(KEY)
    assert reading.records == () and reading.unreadable == 1


def test_a_fresh_start_discards_the_records_with_the_snapshots(tmp_path) -> None:
    store = SnapshotStore(str(tmp_path))
    store.partition(KEY, 0).attempt_ledger().recorder(0, "a0", "run").write({}, final=False)
    store.discard_snapshots(KEY)
    assert store.attempt_counts(KEY).records == ()


def test_counters_are_counts() -> None:
    with pytest.raises(ValueError, match="counters must map names to ints >= 0"):
        AttemptCounts(0, "a0", "run", {"requests_made": -1})
