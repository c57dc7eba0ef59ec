"""The partition runner without Spark: crash at any output, resume, and every record is
emitted exactly once, with calls only for what was not committed."""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.enrichers import ResponseField
from spark_jobs.enrichers.errors import AccountError, ServerError
from spark_jobs.partition_runner import ApiOutageError, PartitionRunner, PartitionTask
from spark_jobs.partition_runner.row_enrichment import EVENT_MS
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.spec.job_spec import JobSpec

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


def make_spec(
    snapshot_dir: str, mode: str, max_rows: int, watermark_every: int = 10, **kw
) -> JobSpec:
    return JobSpec(
        input="unused",
        output="unused",
        key_column="id",
        event_time_column="event_time",
        watermark_every=watermark_every,
        snapshot_dir=snapshot_dir,
        enricher=kw.pop("enricher", "tests.unit.test_partition_runner:scored"),
        response_fields={"score": ResponseField("$.score", "float")},
        mode=mode,
        capacity=8,
        snapshot_interval=kw.pop("snapshot_interval", 3600),
        snapshot_max_rows=max_rows,
        **kw,
    )


INPUT = pa.schema([("id", pa.string()), ("amount", pa.int64()), (EVENT_MS, pa.int64())])


def batches(n: int, size: int = 25) -> list[pa.RecordBatch]:
    rows = [{"id": f"k{i:04d}", "amount": i, EVENT_MS: i * 1000} for i in range(n)]
    return [pa.RecordBatch.from_pylist(rows[i : i + size], schema=INPUT) for i in range(0, n, size)]


def run_partition(
    spec: JobSpec, n: int, stop_after: int | None, attempt: str, run_id: str = "run"
) -> list[dict]:
    store = SnapshotStore(spec.snapshot_dir).partition(NamespaceKey("d", "t", "i"), 0)
    runner = PartitionRunner(spec, store, SCHEMA)
    outputs = runner.run(batches(n), PartitionTask(0, attempt, n, "fingerprint", run_id))
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
    watermark_every=st.integers(1, 20),
)
def test_crash_anywhere_then_resume_emits_every_record_once(
    n, stop_after, mode, max_rows, watermark_every
):
    with tempfile.TemporaryDirectory() as snapshot_dir:
        spec = make_spec(snapshot_dir, mode, max_rows, watermark_every)
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


API_DOWN = {"from": "k0120"}


async def outage_from(record: dict) -> dict:
    """Answers 503 for every id from API_DOWN["from"] on (an outage that started mid-run)."""
    CALLS[record["id"]] += 1
    await asyncio.sleep(0.001)
    if API_DOWN["from"] and record["id"] >= API_DOWN["from"]:
        raise ServerError("HTTP 503 from the API", status=503)
    return {"score": record["amount"] / 10}


def test_an_outage_stops_the_partition_without_dead_letters_and_resume_completes(tmp_path):
    spec = make_spec(
        str(tmp_path),
        "unordered",
        40,
        watermark_every=7,
        max_attempts=2,
        outage_threshold=5,
        enricher="tests.unit.test_partition_runner:outage_from",
    )
    API_DOWN["from"] = "k0120"
    with pytest.raises(ApiOutageError, match="5 records in a row failed"):
        run_partition(spec, 300, None, "a0")
    committed = SnapshotStore(str(tmp_path)).partition(NamespaceKey("d", "t", "i"), 0).latest()
    assert committed.dead_letter_rows == 0, "the outage's failures are retried, not dead letters"
    API_DOWN["from"] = None
    rows = run_partition(spec, 300, None, "a1")
    assert Counter(r["id"] for r in rows) == Counter(f"k{i:04d}" for i in range(300))
    assert [r["_error"] for r in rows if r["_error"]] == []


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 150),
    budget=st.integers(1, 40),
    mode=st.sampled_from(["ordered", "unordered"]),
    max_rows=st.integers(1, 30),
)
def test_a_spent_budget_stops_each_run_and_the_next_runs_finish_paying_once(
    n, budget, mode, max_rows
):
    """Runs of ``budget`` calls each until done: no run calls more than its budget, no
    record is called twice over all runs, and the last run's output (replay + new) holds
    every record exactly once."""
    with tempfile.TemporaryDirectory() as snapshot_dir:
        spec = make_spec(snapshot_dir, mode, max_rows, partitions=1, max_requests=budget)
        store = SnapshotStore(snapshot_dir).partition(NamespaceKey("d", "t", "i"), 0)
        total: Counter = Counter()
        for run in range(n + 1):
            CALLS.clear()
            rows = run_partition(spec, n, None, f"a{run}", run_id=f"r{run}")
            assert sum(CALLS.values()) <= budget
            total += CALLS
            stats = store.latest().stats
            if stats["finished"]:
                break
            assert stats["budget_exhausted"] and stats["run_requests"] == budget
        assert Counter(r["id"] for r in rows) == Counter(f"k{i:04d}" for i in range(n))
        assert total == Counter(f"k{i:04d}" for i in range(n))  # each paid for once
        assert run == (n - 1) // budget  # every run but the last spent its whole budget


KEY_OK = {"ok": False}


async def refused_until_fixed(record: dict) -> dict:
    """401 for every record until the key is fixed (KEY_OK["ok"])."""
    CALLS[record["id"]] += 1
    await asyncio.sleep(0.001)
    if not KEY_OK["ok"]:
        refused = "HTTP 401: the credentials were refused (body not shown) (GET http://api/x)"
        raise AccountError(refused, status=401, code=None)
    return {"score": record["amount"] / 10}


@pytest.mark.parametrize("mode", ["ordered", "unordered"])
def test_a_systemic_failure_stops_the_partition_without_dead_letters_and_resume_completes(
    tmp_path, mode
):
    spec = make_spec(
        str(tmp_path), mode, 40, enricher="tests.unit.test_partition_runner:refused_until_fixed"
    )
    KEY_OK["ok"] = False
    CALLS.clear()
    run_partition(spec, 300, None, "a0")  # ends, without raising: the driver fails the run
    committed = SnapshotStore(str(tmp_path)).partition(NamespaceKey("d", "t", "i"), 0).latest()
    assert committed.dead_letter_rows == 0 and committed.committed_rows == 0
    reason = committed.stats["systemic_failure"]
    assert "account-level failure: the API answered 401: the credentials were refused" in reason
    assert not committed.stats["finished"]
    assert sum(CALLS.values()) <= 1 + spec.capacity, "stopped at the first answer"
    KEY_OK["ok"] = True
    rows = run_partition(spec, 300, None, "a1")
    assert Counter(r["id"] for r in rows) == Counter(f"k{i:04d}" for i in range(300))
    assert [r["_error"] for r in rows if r["_error"]] == []


SEEN_WHILE_STUCK: dict[str, object] = {}


async def stuck_at_k0005(record: dict) -> dict:
    """Answers at once, but k0005 only after the partition has had time to cut without an
    output: in ordered mode nothing is emitted while it waits. It keeps the latest commit
    it sees then."""
    CALLS[record["id"]] += 1
    if record["id"] == "k0005":
        store = SnapshotStore(str(SEEN_WHILE_STUCK["dir"]))
        await asyncio.sleep(0.5)  # ten snapshot intervals with no output
        part = store.partition(NamespaceKey("d", "t", "i"), 0)
        SEEN_WHILE_STUCK["manifest"] = await asyncio.to_thread(part.latest)
    return {"score": record["amount"] / 10}


def test_a_partition_cuts_on_its_timer_while_no_output_comes(tmp_path):
    spec = make_spec(
        str(tmp_path),
        "ordered",
        10_000,
        enricher="tests.unit.test_partition_runner:stuck_at_k0005",
        snapshot_interval=0.05,
    )
    SEEN_WHILE_STUCK["dir"] = tmp_path
    CALLS.clear()
    rows = run_partition(spec, 40, None, "a0")
    manifest = SEEN_WHILE_STUCK["manifest"]
    # The five records before k0005 were committed by a cut that no output brought about,
    # while the records after it waited, done, behind it.
    assert manifest is not None and manifest.committed_rows == 5
    assert len(manifest.pending) == spec.operator_capacity
    # Those five rows reached Spark once, in order, with the rest.
    assert [r["id"] for r in rows] == [f"k{i:04d}" for i in range(40)]
    assert sum(CALLS.values()) == 40


async def jittered(record: dict) -> dict:
    """Answers after 0-4 ms (by id), so that cuts on the timer fall between outputs."""
    CALLS[record["id"]] += 1
    await asyncio.sleep(int(record["id"][-1]) % 5 / 1000)
    return {"score": record["amount"] / 10}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 300),
    stop_after=st.integers(1, 40),
    mode=st.sampled_from(["ordered", "unordered"]),
)
def test_crash_after_cuts_on_the_timer_then_resume_emits_every_record_once(n, stop_after, mode):
    with tempfile.TemporaryDirectory() as snapshot_dir:
        spec = make_spec(
            snapshot_dir,
            mode,
            10_000,
            enricher="tests.unit.test_partition_runner:jittered",
            snapshot_interval=0.003,
        )
        CALLS.clear()
        run_partition(spec, n, stop_after, "a0")
        store = SnapshotStore(snapshot_dir).partition(NamespaceKey("d", "t", "i"), 0)
        committed = store.latest()
        done_at_crash = committed.committed_rows if committed else 0
        CALLS.clear()
        rows = run_partition(spec, n, None, "a1")
        assert Counter(r["id"] for r in rows) == Counter(f"k{i:04d}" for i in range(n))
        assert all(r["score"] == r["amount"] / 10 for r in rows)
        assert sum(CALLS.values()) <= n - done_at_crash
