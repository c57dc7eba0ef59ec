"""The namespace's progress record during a real job (Spark ``local[2]``, the demo API on
loopback): the driver keeps it current while the tasks run, the Airflow reporter reads it
in at most three storage requests per reading (counted by a counting fsspec wrapper over
the same directory), and it ends as the manifests say."""

from __future__ import annotations

import time

import pytest

from benchmarks.storage_requests import counted_requests, counting_url
from demo.stack import demo_api
from enrichment_airflow.progress_reporter import progress_line
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

from .job_support import job_args, kill_group, read_output, start_job, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KEY = NamespaceKey("manual", "enrich", "default")
ROWS = 2_000
#: How often the test reads progress while the job runs (the reporter reads every 5 s).
READ_EVERY_S = 0.2
#: The API answers 503 to every request after the first 600.
OUTAGE_AFTER_600 = {"outage_after_requests": 600, "outage_requests": 10**9}


def _committed(line: str) -> int:
    return int(line.split(" / ")[0].replace(" ", ""))


def test_the_driver_keeps_the_record_the_airflow_reporter_reads_cheaply(tmp_path):
    write_input(tmp_path / "in" / "part.jsonl", [f"k{i:05d}" for i in range(ROWS)])
    reader = SnapshotStore(counting_url(tmp_path / "snapshots"))
    lines: list[str] = []
    costs: list[int] = []
    with demo_api() as api:
        api.post("/faults", {"latency_ms": 100})  # long enough to be read while it runs
        args = job_args(tmp_path, api.url, "--partitions", "4", "--capacity", "8")
        job = start_job([*args, "--progress-interval", "0.5", "--keep-snapshots"])
        try:
            while job.poll() is None:
                with counted_requests() as requests:
                    line = progress_line(reader, KEY)
                costs.append(sum(requests.values()))
                if line is not None and line not in lines:
                    lines.append(line)
                time.sleep(READ_EVERY_S)
            output, _ = job.communicate(timeout=60)
        finally:
            if job.poll() is None:
                kill_group(job)
    assert job.returncode == 0, output[-3000:]
    assert max(costs) <= 3, f"storage requests per progress reading: {sorted(set(costs))}"
    seen = [_committed(line) for line in lines]
    assert any(0 < done < ROWS for done in seen), f"no reading while it ran: {lines}"
    assert seen == sorted(seen) and seen[-1] == ROWS, lines
    last = lines[-1]
    assert last.startswith("2 000 / 2 000 committed, epoch ") and last.endswith(", 0 in flight")

    store = SnapshotStore(str(tmp_path / "snapshots"))
    record, scanned = store.progress_record(KEY), store.namespace_progress(KEY)
    assert record is not None and record.records_total == ROWS
    # What readers judge a silent run by (snapshots/progress.py): the job's own intervals.
    intervals = (record.snapshot_interval_ms, record.progress_interval_ms)
    assert record.partition_count == 4 and intervals == (500, 500)
    assert [(p.partition, p.epoch, p.done_rows, p.finished) for p in record.partitions] == [
        (p.partition, p.epoch, p.done_rows, bool(p.stats.get("finished"))) for p in scanned
    ]
    _, _, summary = read_output(tmp_path / "out")
    assert summary["enriched"] + summary["dead_letters"] == ROWS == record.done
    assert summary["epochs"] == sum(p.epoch + 1 for p in scanned)
    assert summary["requests_made"] == ROWS and summary["replayed_from_snapshot"] == 0
    assert summary["watermark"] == record.watermark()
    assert "progress: epoch" in output and "records committed" in output


def test_a_run_failed_by_an_outage_leaves_the_record_where_its_tasks_stopped(tmp_path):
    """The driver waits for the tasks Spark kills after the failure, whose last cut comes
    after the job failed, then writes the record once more: the page then shows what a
    resume starts from."""
    write_input(tmp_path / "in" / "part.jsonl", [f"k{i:05d}" for i in range(ROWS)])
    with demo_api() as api:
        api.post("/faults", {"latency_ms": 20, **OUTAGE_AFTER_600})
        args = job_args(tmp_path, api.url, "--partitions", "4", "--capacity", "8")
        job = start_job([*args, "--progress-interval", "60"])  # no line before the failure
        output, _ = job.communicate(timeout=300)
    assert job.returncode != 0, output[-3000:]
    store = SnapshotStore(str(tmp_path / "snapshots"))
    record, scanned = store.progress_record(KEY), store.namespace_progress(KEY)
    assert record is not None and 0 < record.done < ROWS
    assert [(p.partition, p.epoch, p.done_rows, p.in_flight) for p in record.partitions] == [
        (p.partition, p.epoch, p.done_rows, p.in_flight) for p in scanned
    ]
