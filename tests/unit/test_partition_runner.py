"""The partition runner without Spark: crash at any output, resume, and every record is
emitted exactly once, with calls only for what was not committed."""

from __future__ import annotations

import tempfile
from collections import Counter

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.enrichers import ResponseField
from spark_jobs.job_spec import JobSpec
from spark_jobs.partition_runner import PartitionRunner, PartitionTask
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

CALLS: Counter = Counter()
SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("amount", pa.int64()),
        ("score", pa.float64()),
        ("_error", pa.string()),
        ("_attempts", pa.int64()),
    ]
)


async def scored(record: dict) -> dict:
    """Deterministic enrichment; ids ending in 7 are rejected (a permanent failure)."""
    CALLS[record["id"]] += 1
    if record["id"].endswith("7"):
        raise ValueError(f"no score for {record['id']}")
    return {"score": record["amount"] / 10}


def make_spec(snapshot_dir: str, mode: str, max_rows: int) -> JobSpec:
    return JobSpec(
        input="unused",
        output="unused",
        key_column="id",
        snapshot_dir=snapshot_dir,
        enricher="tests.unit.test_partition_runner:scored",
        response_fields={"score": ResponseField("$.score", "float")},
        mode=mode,
        capacity=8,
        snapshot_interval=3600,
        snapshot_max_rows=max_rows,
    )


def batches(n: int, size: int = 25) -> list[pa.RecordBatch]:
    rows = [{"id": f"k{i:04d}", "amount": i} for i in range(n)]
    return [
        pa.RecordBatch.from_pylist(
            rows[i : i + size], schema=pa.schema([("id", pa.string()), ("amount", pa.int64())])
        )
        for i in range(0, n, size)
    ]


def run_partition(spec: JobSpec, n: int, stop_after: int | None, attempt: str) -> list[dict]:
    store = SnapshotStore(spec.snapshot_dir).partition(NamespaceKey("d", "t", "i"), 0)
    runner = PartitionRunner(spec, store, SCHEMA)
    outputs = runner.run(batches(n), PartitionTask(0, attempt, n, "fingerprint"))
    rows: list[dict] = []
    for count, batch in enumerate(outputs, start=1):
        rows += batch.to_pylist()
        if stop_after is not None and count >= stop_after:
            outputs.close()  # the task dies here: its output is discarded by Spark
            break
    return rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 400),
    stop_after=st.integers(1, 30),
    mode=st.sampled_from(["ordered", "unordered"]),
    max_rows=st.integers(1, 60),
)
def test_crash_anywhere_then_resume_emits_every_record_once(n, stop_after, mode, max_rows):
    with tempfile.TemporaryDirectory() as snapshot_dir:
        spec = make_spec(snapshot_dir, mode, max_rows)
        CALLS.clear()
        run_partition(spec, n, stop_after, "a0")
        store = SnapshotStore(snapshot_dir).partition(NamespaceKey("d", "t", "i"), 0)
        committed = store.latest()
        done_at_crash = committed.committed_rows + committed.dead_letter_rows if committed else 0
        CALLS.clear()
        rows = run_partition(spec, n, None, "a1")
        assert Counter(r["id"] for r in rows) == Counter(f"k{i:04d}" for i in range(n))
        for row in rows:
            if row["id"].endswith("7"):
                assert row["_error"].startswith("InvalidRowError") or "no score" in row["_error"]
                assert row["score"] is None
            else:
                assert row["_error"] is None and row["score"] == row["amount"] / 10
        assert sum(CALLS.values()) <= n - done_at_crash  # committed outcomes are not paid again
        if mode == "ordered":  # in input order within each output (results, dead letters)
            for failed in (False, True):
                kind = [r["id"] for r in rows if (r["_error"] is not None) == failed]
                assert kind == sorted(kind)
