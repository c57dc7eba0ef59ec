"""When a running namespace counts as stalled (``spark_jobs/snapshots/progress.py``), judged with
explicit clocks: the lease as the driver's heartbeat writes it, the progress record as the
driver folds it, and the moment of the reading."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fsspec.implementations.local import LocalFileSystem

from enrichment_airflow.progress_reporter import progress_line
from spark_jobs.driver.progress import ProgressFolder
from spark_jobs.snapshots import NamespaceKey, NamespaceLease, SnapshotStore
from spark_jobs.snapshots.lease import Lease
from spark_jobs.snapshots.progress import PartitionEntry, ProgressRecord, stall_of

T0 = 1_763_600_000.0  # the lease's last renewal
TTL = 60.0  # renewed every 20 s: silent for more than 40 s is stalled; expires after 60 s
KEY = NamespaceKey("enrich_customers", "enrich", "2024-05-01T00:00:00+00:00")


def lease(renewed_at: float | None = T0, ttl: float = TTL) -> Lease:
    return Lease("run-1", expires_at=T0 + ttl, renewed_at=renewed_at)


def record(last_commit: float | None, intervals_ms: tuple[int, int] | None = (500, 2000)):
    """A run of two partitions; partition 1's last commit at ``last_commit`` (Unix time;
    None: no commit yet), partition 0's earlier. A commit shows in the record within
    0.5 + 2 s, so more than 5 s without one is overdue."""
    entry = PartitionEntry(0, 3, 100, 1000, 90, 0, 10, None, int((T0 - 100) * 1000), "a0")
    parts: tuple[PartitionEntry, ...] = ()
    if last_commit is not None:
        parts = (entry, replace(entry, partition=1, committed_at_ms=int(last_commit * 1000)))
    snapshot_ms, progress_ms = intervals_ms or (None, None)
    return ProgressRecord("run-1", int(T0 * 1000), 2, 2000, parts, (), snapshot_ms, progress_ms)


def heartbeat_lease(store: SnapshotStore, ttl: float) -> None:
    """The lease as the driver takes and renews it, at ``T0``."""
    path = store.namespace_path(KEY)
    NamespaceLease(LocalFileSystem(), path, "run-1", ttl, clock=lambda: T0).acquire(wait_s=0)


def test_silence_over_twice_both_intervals_is_a_stall_before_the_lease_expires():
    silent = record(last_commit=T0 - 3)
    assert stall_of(silent, lease(), now=T0 + 40) is None, "exactly twice: not yet"
    stall = stall_of(silent, lease(), now=T0 + 45)
    assert stall is not None
    assert stall.describe() == "no progress for 45 s"
    assert stall.silent_s == pytest.approx(45) and stall.expires_in_s == pytest.approx(15)
    assert "its lease expires in 15 s" in stall.explain()
    assert stall_of(silent, lease(), now=T0 + 60) is None, "expired: interrupted, not stalled"


def test_a_recent_commit_keeps_a_run_alive_whose_lease_renewals_are_late():
    assert stall_of(record(last_commit=T0 + 41), lease(), now=T0 + 45) is None
    # ... until commits are overdue too (more than twice 2.5 s): counted from the commit.
    stall = stall_of(record(last_commit=T0 + 39), lease(), now=T0 + 45)
    assert stall is not None and stall.describe() == "no progress for 6 s"


def test_a_renewed_lease_keeps_a_run_alive_whose_commits_stopped():
    """Every partition waits on a slow API: no cut, but the driver renews its lease."""
    assert stall_of(record(last_commit=T0 - 600), lease(renewed_at=T0), now=T0 + 39) is None


def test_a_run_before_its_first_commit_is_judged_by_its_lease_alone():
    assert stall_of(record(last_commit=None), lease(), now=T0 + 39) is None
    stall = stall_of(record(last_commit=None), lease(), now=T0 + 50)
    assert stall is not None and stall.describe() == "no progress for 50 s"
    stall = stall_of(None, lease(), now=T0 + 50)  # no progress record written yet
    assert stall is not None and stall.describe() == "no progress for 50 s"


def test_a_record_of_an_earlier_version_judges_commits_by_the_renewal_interval():
    old = record(last_commit=T0 + 10, intervals_ms=None)
    assert stall_of(old, lease(), now=T0 + 45) is None, "a commit 35 s ago: within 2 x 20 s"
    assert stall_of(old, lease(), now=T0 + 51) is not None


def test_without_a_live_lease_or_its_renewal_time_nothing_is_judged():
    assert stall_of(record(last_commit=T0), None, now=T0 + 45) is None
    assert stall_of(record(last_commit=T0), lease(renewed_at=None), now=T0 + 45) is None


def test_the_interval_is_the_one_the_lease_was_written_with():
    """A longer TTL (``--lease-ttl 300``): renewals every 100 s, a stall after 200 s, told
    in minutes."""
    assert stall_of(record(last_commit=T0), lease(ttl=300), now=T0 + 199) is None
    stall = stall_of(record(last_commit=T0), lease(ttl=300), now=T0 + 252)
    assert stall is not None and stall.describe() == "no progress for 4 min 12 s"


def test_what_the_driver_writes_is_what_the_rule_reads(tmp_path):
    """The heartbeat's lease and the folder's record, as stored."""
    store = SnapshotStore(str(tmp_path))
    heartbeat_lease(store, ttl=30)
    written = store.lease(KEY, owner="").read()
    assert written is not None and written.renewal_interval == pytest.approx(10)
    ProgressFolder(store, KEY, "run-1", 2, 2000, intervals=(0.5, 2.0)).refresh()
    stored = store.progress_record(KEY)
    assert stored is not None
    assert (stored.snapshot_interval_ms, stored.progress_interval_ms) == (500, 2000)
    assert stall_of(stored, written, now=T0 + 20) is None
    stall = stall_of(stored, written, now=T0 + 21)
    assert stall is not None and stall.describe() == "no progress for 21 s"


def test_the_storage_tab_line_says_the_same(tmp_path):
    store = SnapshotStore(str(tmp_path))
    store.write_progress_record(KEY, record(last_commit=T0 - 3))
    heartbeat_lease(store, ttl=TTL)
    line = "180 / 2 000 committed, epoch 3, 20 in flight"
    assert progress_line(store, KEY, now=T0 + 30) == line
    assert progress_line(store, KEY, now=T0 + 45) == f"{line}; no progress for 45 s"
    assert progress_line(store, KEY, now=T0 + 61) == line, "expired: the page says interrupted"
