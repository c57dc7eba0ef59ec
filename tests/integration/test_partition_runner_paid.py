"""Nothing paid twice, nothing paid lost: the partition runner (without Spark) against the
demo API on loopback, counting every call it receives, on input that repeats its keys.
A budget stop or a crash, then a resume, pays for no committed key again; the response
cache is written at every cut and holds no more than one cut's answers."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demo.stack import demo_api
from spark_jobs.enrichers import ResponseField
from spark_jobs.partition_runner import PartitionRunner, PartitionTask
from spark_jobs.partition_runner.replay import replay
from spark_jobs.snapshots import NamespaceKey, PartitionSnapshots, SnapshotStore
from spark_jobs.spec.job_spec import JobSpec

pytestmark = pytest.mark.slow

KEYS = 150
RECORDS = 600
#: Every key four times, spread over the input so repeats span cuts and runs.
IDS = [f"k{(i * 7) % KEYS:04d}" for i in range(RECORDS)]
INPUT = pa.schema([("id", pa.string()), ("amount", pa.int64())])
SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("amount", pa.int64()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("_error", pa.string()),
        ("_attempts", pa.int64()),
    ]
)


def spec(snapshot_dir: Path, api_url: str, **kw) -> JobSpec:
    """One partition cutting a snapshot every 20 ms (many cuts in a short run)."""
    return JobSpec(
        input="unused",
        output="unused",
        key_column="id",
        snapshot_dir=str(snapshot_dir),
        url_template=api_url + "/customers/{id}",
        response_fields={
            "name": ResponseField("$.name"),
            "score": ResponseField("$.score", "float"),
        },
        partitions=1,
        capacity=4,
        snapshot_interval=0.02,
        **kw,
    )


def store(job: JobSpec) -> PartitionSnapshots:
    return SnapshotStore(job.snapshot_dir).partition(NamespaceKey("d", "t", "i"), 0)


def run_partition(
    job: JobSpec, ids: list[str], attempt: str, run_id: str = "run", stop_after: int | None = None
) -> list[dict]:
    """One attempt; with ``stop_after`` it dies after that many output batches."""
    rows = [{"id": key, "amount": i} for i, key in enumerate(ids)]
    batches = [
        pa.RecordBatch.from_pylist(rows[i : i + 50], schema=INPUT) for i in range(0, len(rows), 50)
    ]
    task = PartitionTask(0, attempt, len(ids), "fingerprint", run_id)
    outputs = PartitionRunner(job, store(job), SCHEMA).run(batches, task)
    out: list[dict] = []
    for count, batch in enumerate(outputs, start=1):
        out += batch.to_pylist()
        if stop_after is not None and count >= stop_after:
            outputs.close()  # the task dies here: calls in flight are cancelled
            break
    return out


def committed_results(job: JobSpec) -> set[str]:
    """The keys whose results the partition's last snapshot holds."""
    manifest = store(job).latest()
    if manifest is None:
        return set()

    async def ids() -> set[str]:
        return {
            row["id"]
            async for batch in replay(store(job), SCHEMA, manifest)
            for row in batch.to_pylist()
            if row["_error"] is None
        }

    return asyncio.run(ids())


def test_budget_stops_then_resumes_pay_for_each_repeated_key_once(tmp_path):
    with demo_api("--latency-ms", "2") as api:
        run_partition(spec(tmp_path / "unbroken", api.url), IDS, "a0")
        unbroken = api.settled_calls()
        budgeted = spec(tmp_path / "budgeted", api.url, max_requests=40)
        runs: list[int] = []
        while not runs or runs[-1] < RECORDS:
            assert len(runs) < 10, f"no end in sight: {runs}"
            runs.append(len(run_partition(budgeted, IDS, f"a{len(runs)}", f"r{len(runs)}")))
        calls = api.calls_per_key()
    assert unbroken == KEYS  # a clean API: an unbroken run calls each key once
    assert len(runs) >= 4, "the budget stopped the runs"
    # Calls in flight at a budget stop finish and are committed: nothing was in flight.
    assert sum(calls.values()) - unbroken <= unbroken
    assert calls == Counter({key: 2 for key in set(IDS)}), "a key paid twice in one run"


def test_a_crash_then_resume_pays_again_only_for_keys_it_had_not_committed(tmp_path):
    with demo_api("--latency-ms", "2") as api:
        job = spec(tmp_path, api.url)
        run_partition(job, IDS, "a0", stop_after=3)
        api.settled_calls()
        first = api.calls_per_key()
        committed = committed_results(job)
        rows = run_partition(job, IDS, "a1")
        api.settled_calls()
        second = api.calls_per_key() - first
    assert Counter(r["id"] for r in rows) == Counter(IDS)
    assert all(r["_error"] is None and r["name"] for r in rows)
    assert committed and len(committed) < KEYS, "the crash came mid-way"
    assert not set(second) & committed, "a committed key was paid for again"
    in_flight = set(first) - committed  # paid before the crash, not yet committed
    assert sum(first.values()) + sum(second.values()) <= KEYS + len(in_flight)
    assert max(first.values()) == 1 and max(second.values()) == 1


def test_each_cut_writes_the_caches_new_answers_and_holds_no_more(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("ENRICHMENT_CACHE_KEY", "a random key only this deployment knows")
    caplog.set_level(logging.INFO, logger="spark_jobs.partition_runner.row_enrichment")
    ids = [f"k{i:04d}" for i in range(400)]
    cache = tmp_path / "cache"
    with demo_api("--latency-ms", "5") as api:
        run_partition(spec(tmp_path / "snapshots", api.url, cache_dir=str(cache)), ids, "a0")
    files = sorted(cache.rglob("*.parquet"))
    per_file = [pq.read_metadata(path).num_rows for path in files]
    assert sum(per_file) == len(ids) and len(files) >= 5, per_file
    [held] = re.findall(r"at most (\d+) held at once", caplog.text)
    # The most the cache held in memory is one cut's answers, never the run's.
    assert int(held) == max(per_file) < len(ids) / 4
