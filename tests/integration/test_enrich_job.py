"""The Spark job end to end: real spark-submit-style runs, a real HTTP API on loopback,
crashes by SIGKILL, corrupt snapshots, changed input."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest

from demo.stack import demo_api
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

from .job_support import (
    job_args,
    kill_group,
    read_output,
    run_folders,
    run_job,
    start_job,
    write_input,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KEY = NamespaceKey("manual", "enrich", "default")


def committed(snapshot_dir: Path) -> int:
    store = SnapshotStore(str(snapshot_dir))
    try:
        return sum(p.done_rows for p in store.namespace_progress(KEY))
    except FileNotFoundError:
        return 0


def test_job_enriches_every_record_once_and_dead_letters_bad_rows(tmp_path):
    ids = [f"k{i:05d}" for i in range(300)]
    write_input(
        tmp_path / "in" / "part.jsonl",
        ids,
        extra_lines=[
            '{"id": null, "event_time": 1}',
            '{"id": "broken',
            '{"id": "k-bad", "event_time": "soon"}',
        ],
    )
    with demo_api() as api:
        args = job_args(tmp_path, api.url, "--partitions", "3", "--event-time-column", "event_time")
        code, log = run_job(args)
        assert code == 0, log
        calls = api.calls_per_key()
        # The same job again (a retry of a try that had in fact finished): nothing to do.
        again, again_log = run_job(args)
        assert again == 0 and "already complete: run" in again_log, again_log[-3000:]
        assert api.calls_per_key() == calls
    data, dead, summary = read_output(tmp_path / "out")
    assert sorted(r["id"] for r in data) == ids
    assert all(r["name"] and isinstance(r["score"], float) for r in data)
    errors = sorted(r["error"] for r in dead)
    assert len(errors) == 3
    assert any("key column 'id' is null in file:" in e for e in errors)
    assert any("malformed jsonl record in file:" in e for e in errors)
    assert any(
        "event time column 'event_time'" in e and "'soon' is not a timestamp" in e for e in errors
    )
    assert summary["records_in"] == 303 == summary["enriched"] + summary["dead_letters"]
    assert summary["requests_made"] == 300 == sum(calls.values())
    assert summary["resumed"] is False and summary["watermark"] >= 1_700_000_000_000
    assert "starting fresh: no snapshot" in log
    left = sorted(p.name for p in (tmp_path / "snapshots" / "manual").rglob("*") if p.is_file())
    assert left == ["completed.json"], "after success only the completion record is left"
    assert run_folders(tmp_path / "out") == [summary["run_id"]], "only the published run's"
    assert not list(tmp_path.glob("out.*")), "nothing left beside the output"


def test_sigkill_at_random_moments_then_resume_is_exact_and_cheap(tmp_path):
    """Two crashes at random points of progress, then a clean finish: every record exactly
    once, and repeated API calls bounded by what each crashed run had not committed."""
    rng = random.Random()
    ids = [f"k{i:05d}" for i in range(12_000)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    args = job_args(tmp_path, None, "--partitions", "4", "--capacity", "20", "--resume", "auto")
    uncommitted_calls = 0
    with demo_api("--latency-ms", "15") as api:
        args += ["--url-template", api.url + "/customers/{id}"]
        for target in sorted(rng.uniform(0.15, 0.8) for _ in range(2)):
            calls_before = api.settled_calls()
            done_before = committed(tmp_path / "snapshots")
            job = start_job(args)
            deadline = time.monotonic() + 240
            while committed(tmp_path / "snapshots") < target * len(ids):
                assert job.poll() is None, job.communicate()[0]
                assert time.monotonic() < deadline, "no progress"
                time.sleep(0.2)
            kill_group(job)
            calls = api.settled_calls() - calls_before
            uncommitted_calls += calls - (committed(tmp_path / "snapshots") - done_before)
        code, log = run_job(args)
        assert code == 0, log
        calls = api.calls_per_key()
    data, dead, summary = read_output(tmp_path / "out")
    assert dead == []
    assert Counter(r["id"] for r in data) == Counter(ids)
    repeated = sum(calls.values()) - len(ids)
    print(
        f"\n2 SIGKILLs, {len(ids)} records: {summary['replayed_from_snapshot']} replayed, "
        f"{repeated} calls repeated (bound {uncommitted_calls})"
    )
    assert repeated <= uncommitted_calls, (repeated, uncommitted_calls)
    assert summary["resumed"] is True and summary["replayed_from_snapshot"] > 0
    assert "resuming epoch" in log


def test_an_outage_fails_a_task_and_spark_retries_it_from_its_snapshot(tmp_path):
    ids = [f"k{i:05d}" for i in range(3000)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    with demo_api(
        "--latency-ms", "5", "--outage-after-requests", "1500", "--outage-requests", "100"
    ) as api:
        args = job_args(
            tmp_path,
            api.url,
            "--partitions",
            "2",
            "--capacity",
            "10",
            "--outage-threshold",
            "20",
            "--max-attempts",
            "2",
            # The outage is counted in requests: a queue deeper than the requests in
            # flight would spend them on first attempts whose retries then succeed, and
            # the streak of failures this test is about would not form.
            "--queue-capacity",
            "10",
        )
        code, log = run_job(args, env={"SPARK_MASTER": "local[2,4]"})  # 4 tries per task
        assert code == 0, log
        calls = api.calls_per_key()
    data, dead, summary = read_output(tmp_path / "out")
    assert dead == [] and Counter(r["id"] for r in data) == Counter(ids)
    assert "API unavailable" in log
    assert summary["resumed"] is True and summary["replayed_from_snapshot"] > 0
    # Repeated calls: the outage's 100 answers, plus at most the calls in flight
    # (capacity 10) of each of the 2 partitions' failed tries (at most 3 of 4).
    assert sum(calls.values()) - len(ids) <= 100 + 2 * 3 * 10


def _corruptible(snapshots: Path) -> tuple[list[Path], list[Path]] | None:
    """Partition 0's commits and partition 1's segments (oldest first) once there are two
    commits to fall back between and a segment to corrupt, else None."""
    manifests = sorted(snapshots.rglob("part-00000/commits/*.snap"))
    try:  # a running job deletes superseded segments while they are listed
        segments = sorted(
            snapshots.rglob("part-00001/segments/*.arrow"), key=lambda p: p.stat().st_mtime
        )
    except FileNotFoundError:
        return None
    return (manifests, segments) if len(manifests) >= 2 and segments else None


def test_corrupt_latest_manifest_and_segment_fall_back_to_an_earlier_epoch(tmp_path):
    ids = [f"k{i:05d}" for i in range(6000)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    snapshots = tmp_path / "snapshots"
    with demo_api("--latency-ms", "20") as api:
        # Cuts every 0.1 s: a partition's rows reach a segment at its first base cut with
        # rows (its first or its 32nd), well before its 3 000 records are done.
        args = job_args(
            tmp_path, api.url, "--partitions", "2", "--capacity", "10", "--snapshot-interval", "0.1"
        )
        job = start_job(args)
        while not _corruptible(snapshots):
            assert job.poll() is None, job.communicate()[0]
            time.sleep(0.2)
        kill_group(job)
        found = _corruptible(snapshots)
        assert found is not None and committed(snapshots) < len(ids)
        manifests, segments = found
        manifests[-1].write_bytes(manifests[-1].read_bytes()[:-20])  # torn write
        raw = bytearray(segments[-1].read_bytes())
        raw[len(raw) // 2] ^= 0xFF  # bit flip
        segments[-1].write_bytes(bytes(raw))
        code, log = run_job(args)
        assert code == 0, log
    data, dead, summary = read_output(tmp_path / "out")
    assert dead == [] and Counter(r["id"] for r in data) == Counter(ids)
    assert summary["resumed"] is True


def test_changed_input_fails_with_require_and_starts_fresh_with_auto(tmp_path):
    ids = [f"k{i:05d}" for i in range(200)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    with demo_api() as api:
        code, log = run_job(job_args(tmp_path, api.url, "--partitions", "2", "--keep-snapshots"))
        assert code == 0, log
        write_input(tmp_path / "in" / "part.jsonl", [*ids, "k-new"])
        code, log = run_job(job_args(tmp_path, api.url, "--partitions", "2", "--resume", "require"))
        assert code == 3
        assert "--resume require: the job changed since the snapshot: input file changed:" in log
        assert "part.jsonl" in log and "Traceback" not in log
        code, log = run_job(job_args(tmp_path, api.url, "--partitions", "2", "--resume", "auto"))
        assert code == 0, log
        assert "starting fresh: the job changed since the snapshot: input file changed" in log
    data, _, summary = read_output(tmp_path / "out")
    assert len(data) == 201 and summary["resumed"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "sideways"], "--mode"),
        (["--partitions", "0"], "--partitions: must be a positive integer"),
        (["--response-field", "name"], "--response-field: expected NAME=JSONPATH"),
    ],
)
def test_bad_options_fail_before_spark_starts_naming_the_option(tmp_path, args, message):
    started = time.monotonic()
    code, log = run_job(job_args(tmp_path, "http://127.0.0.1:9", *args), timeout=60)
    assert code == 2 and message in log
    assert "Traceback" not in log and "SparkContext" not in log
    assert time.monotonic() - started < 15
