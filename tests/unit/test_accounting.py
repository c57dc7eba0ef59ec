"""The summary's call accounting over attempt records and manifest chains."""

from __future__ import annotations

from spark_jobs.driver.accounting import account_calls
from spark_jobs.snapshots import AttemptCounts


def calls(partition: int, attempt: str, made: int, *, final: bool) -> AttemptCounts:
    return AttemptCounts(partition, attempt, "run", {"requests_made": made}, final)


def test_every_attempt_is_counted_once_whatever_its_cuts_became() -> None:
    """Partition 0: a killed attempt (its manifests superseded by a speculative twin that
    finished) and the twin; partition 1: one attempt. The best manifests count only the
    chain that led to them."""
    records = [
        calls(0, "s1-t0-a0", 40, final=False),
        calls(0, "s1-t9-a0", 55, final=True),
        calls(1, "s1-t1-a0", 30, final=True),
    ]
    chains = {0: {"requests_made": 55}, 1: {"requests_made": 30}}
    accounting = account_calls(chains, records)
    assert accounting.totals["requests_made"] == 125
    assert accounting.record.calls == "lower_bound"
    assert (accounting.record.attempts, accounting.record.attempts_cut_short) == (3, 1)


def test_attempts_that_all_ended_as_meant_make_the_count_exact() -> None:
    records = [calls(0, "a0", 10, final=True), calls(0, "a1", 5, final=True)]
    accounting = account_calls({0: {"requests_made": 15}}, records)
    assert accounting.record.calls == "exact" and accounting.totals["requests_made"] == 15
    assert accounting.record.to_json() == {
        "calls": "exact",
        "attempts": 2,
        "attempts_cut_short": 0,
        "unreadable_records": 0,
        "unrecorded_partitions": 0,
    }


def test_a_partition_without_records_counts_its_manifests_as_a_lower_bound() -> None:
    """Snapshots written before attempts kept records: the manifests' figure, flagged."""
    accounting = account_calls({0: {"requests_made": 80}}, [calls(1, "a0", 5, final=True)])
    assert accounting.totals["requests_made"] == 85
    assert accounting.record.calls == "lower_bound" and accounting.record.unrecorded_partitions == 1


def test_an_unreadable_record_makes_the_count_a_lower_bound() -> None:
    accounting = account_calls({}, [calls(0, "a0", 5, final=True)], unreadable=1)
    assert accounting.record.calls == "lower_bound" and accounting.totals["requests_made"] == 5
