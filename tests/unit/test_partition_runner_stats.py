"""The counters a partition's manifest carries across attempts and runs."""

from __future__ import annotations

from spark_jobs.partition_runner.stats import RunStats, rss_now_mb
from spark_jobs.snapshots import Manifest, NamespaceKey, SnapshotStore


def resumed(**stats: object) -> Manifest:
    return Manifest("fp", 0, 3, 10, "a0", stats=stats)


def test_a_first_attempt_counts_from_zero() -> None:
    stats = RunStats(None, "r1")
    stats.counters = lambda: {"requests_made": 4, "cache_hits": 1}
    cut = stats.at_cut(final=True, budget_exhausted=False, in_flight=0)
    assert cut["requests_made"] == 4 and cut["run_requests"] == 4 and cut["cache_hits"] == 1
    assert cut["resumed"] is False and cut["finished"] is True and cut["run_id"] == "r1"


def test_counters_carry_on_from_the_manifest_resumed_from() -> None:
    stats = RunStats(resumed(requests_made=10, run_id="r1", run_requests=10), "r1")
    stats.counters = lambda: {"requests_made": 4}
    stats.replayed = 7
    cut = stats.at_cut(final=False, budget_exhausted=True, in_flight=2)
    assert cut["requests_made"] == 14 and cut["run_requests"] == 14
    assert cut["replayed"] == 7 and cut["in_flight"] == 2 and cut["budget_exhausted"] is True
    assert cut["resumed"] is True


def test_the_run_budget_counts_only_attempts_of_the_same_run() -> None:
    assert RunStats(resumed(run_id="r1", run_requests=10), "r1").run_requests_before() == 10
    assert RunStats(resumed(run_id="r0", run_requests=10), "r1").run_requests_before() == 0
    assert RunStats(None, "r1").run_requests_before() == 0


def test_memory_is_the_first_cut_and_the_peak() -> None:
    stats = RunStats(None, "r1")
    stats.counters = lambda: {"requests_made": 0}
    first = stats.at_cut(final=False, budget_exhausted=False, in_flight=0)
    grown = [bytearray(64 * 2**20)]  # keep 64 MiB resident until the next cut
    grown[0][::4096] = b"x" * len(grown[0][::4096])
    second = stats.at_cut(final=False, budget_exhausted=False, in_flight=0)
    assert second["rss_mb_first_cut"] == first["rss_mb_first_cut"] > 0
    assert second["rss_mb_peak"] >= first["rss_mb_peak"] + 32
    assert rss_now_mb() > 0


def test_attempt_records_count_a_crashed_attempts_calls_up_to_its_last_cut(tmp_path) -> None:
    """The partition runner without Spark: an attempt dies mid-run, the next resumes. The
    crashed one's record holds its calls up to its last cut (not final), the resumed
    one's every call it made (final), whatever the manifests kept."""
    from tests.unit.test_partition_runner import CALLS, make_spec, run_partition

    spec = make_spec(str(tmp_path), "unordered", max_rows=20)
    CALLS.clear()
    run_partition(spec, 3000, 2, "a0")
    crashed_calls = sum(CALLS.values())
    CALLS.clear()
    run_partition(spec, 3000, None, "a1")
    resumed_calls = sum(CALLS.values())
    store = SnapshotStore(str(tmp_path))
    records = {r.attempt: r for r in store.attempt_counts(NamespaceKey("d", "t", "i")).records}
    assert records["a1"].final and records["a1"].counters == {"requests_made": resumed_calls}
    assert not records["a0"].final
    assert 0 < records["a0"].counters["requests_made"] <= crashed_calls
