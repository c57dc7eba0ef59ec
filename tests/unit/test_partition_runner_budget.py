"""``--max-requests`` through the partition runner (no Spark, a real snapshot directory):
skewed partitions share one run's budget instead of equal shares, and a retried attempt
of the same run continues its ledger."""

from __future__ import annotations

import asyncio

from spark_jobs.enrichers import ResponseField
from spark_jobs.partition_runner import PartitionRunner, PartitionTask
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.spec.job_spec import JobSpec

from .test_partition_runner import CALLS, SCHEMA, batches, make_spec

KEY = NamespaceKey("d", "t", "i")


async def slow(record: dict) -> dict:
    """Answers after a moment, so an attempt can die with calls still to make."""
    CALLS[record["id"]] += 1
    await asyncio.sleep(0.02)
    return {"score": record["amount"] / 10}


def run(spec, partition: int, n: int, attempt: str, run_id: str, stop_after=None) -> int:
    """One attempt at ``partition`` with ``n`` records; the calls it made."""
    CALLS.clear()
    snapshots = SnapshotStore(spec.snapshot_dir).partition(KEY, partition)
    task = PartitionTask(partition, attempt, n, "fingerprint", run_id)
    outputs = PartitionRunner(spec, snapshots, SCHEMA).run(batches(n), task)
    for count, _ in enumerate(outputs, start=1):
        if stop_after is not None and count >= stop_after:
            outputs.close()  # the task dies here
            break
    return sum(CALLS.values())


def stats(spec, partition: int) -> dict:
    return SnapshotStore(spec.snapshot_dir).partition(KEY, partition).latest().stats


def test_a_skewed_partition_spends_what_the_others_left_and_finishes(tmp_path):
    """130 records over four partitions, one of them 100: an equal share (32) would
    stop it. From the run's ledger the small ones take a chunk each and give back what
    they did not spend, and the large one finishes on exactly the budget."""
    spec = make_spec(
        str(tmp_path), "unordered", 20, partitions=4, max_concurrent_partitions=2, max_requests=130
    )
    sizes = {1: 10, 2: 10, 3: 10, 0: 100}
    calls = {p: run(spec, p, n, f"a{p}", "run-1") for p, n in sizes.items()}
    assert calls == sizes
    for partition in sizes:
        assert stats(spec, partition)["finished"], partition
        assert not stats(spec, partition)["budget_exhausted"], partition


def test_a_retried_attempt_continues_the_run_s_ledger(tmp_path):
    spec = JobSpec(
        input="unused",
        output="unused",
        key_column="id",
        snapshot_dir=str(tmp_path),
        enricher="tests.unit.test_partition_runner_budget:slow",
        response_fields={"score": ResponseField("$.score", "float")},
        capacity=4,
        snapshot_interval=0.01,
        partitions=1,
        max_requests=60,
    )
    first = run(spec, 0, 200, "a0", "run-1", stop_after=1)  # dies after its first cut
    assert 0 < first < 60
    second = run(spec, 0, 200, "a1", "run-1")
    chunk = 8  # chunk_size(60, 1)
    assert 60 - chunk < first + second <= 60, "what the dead attempt claimed counts as spent"
    assert stats(spec, 0)["budget_exhausted"]
    assert run(spec, 0, 200, "a0", "run-2") == 60, "the next run has a budget of its own"
