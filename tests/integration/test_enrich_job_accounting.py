"""The cost report against the API's own count: the real job, a real demo API on loopback
counting every request it receives, runs that finish, retry tasks, or are killed."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from demo.stack import demo_api

from .job_support import job_args, kill_group, read_output, run_job, start_job, write_input
from .test_enrich_job import committed

pytestmark = [pytest.mark.spark, pytest.mark.slow]

INTERVAL_S = 1.0


def received(api) -> int:
    """Requests the API has answered or broken, by its own count."""
    return int(api.get("/stats")["total"])


def most_in_one_interval(samples: list[tuple[float, int]]) -> int:
    """The most requests the API received within any window of one snapshot interval."""
    most = 0
    for at, total in samples:
        before = [count for t, count in samples if t <= at - INTERVAL_S]
        most = max(most, total - (before[-1] if before else 0))
    return most


def test_an_uninterrupted_run_counts_exactly_what_the_api_received(tmp_path):
    ids = [f"k{i:05d}" for i in range(1500)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    with demo_api("--latency-ms", "5", "--error-rate", "0.05") as api:
        code, log = run_job(job_args(tmp_path, api.url, "--partitions", "2", "--capacity", "10"))
        assert code == 0, log
        total = received(api)
    _, _, summary = read_output(tmp_path / "out")
    assert total > len(ids), "the 5 % errors (500) were retried"
    assert summary["requests_made"] == total == summary["cost"]["requests_made"]
    assert summary["accounting"] == {
        "calls": "exact",
        "attempts": 2,
        "attempts_cut_short": 0,
        "unreadable_records": 0,
        "unrecorded_partitions": 0,
    }


def test_tasks_spark_retried_after_an_outage_are_counted_exactly(tmp_path):
    ids = [f"k{i:05d}" for i in range(3000)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    with demo_api(
        "--latency-ms", "5", "--outage-after-requests", "1500", "--outage-requests", "100"
    ) as api:
        args = job_args(
            tmp_path,
            api.url,
            *("--partitions", "2", "--capacity", "10", "--queue-capacity", "10"),
            *("--outage-threshold", "20", "--max-attempts", "2"),
        )
        code, log = run_job(args, env={"SPARK_MASTER": "local[2,4]"})  # 4 tries per task
        assert code == 0, log
        total = received(api)
    _, _, summary = read_output(tmp_path / "out")
    assert "API unavailable" in log and summary["resumed"] is True
    assert summary["requests_made"] == total
    assert summary["accounting"]["calls"] == "exact", summary["accounting"]
    assert summary["accounting"]["attempts"] > 2, "a task was retried"


def test_a_killed_run_is_counted_up_to_one_snapshot_interval_and_says_so(tmp_path):
    ids = [f"k{i:05d}" for i in range(6000)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    with demo_api("--latency-ms", "20") as api:
        args = job_args(
            tmp_path,
            api.url,
            *("--partitions", "2", "--capacity", "10", "--snapshot-interval", str(INTERVAL_S)),
        )
        job = start_job(args)
        samples: list[tuple[float, int]] = []
        deadline = time.monotonic() + 240
        while committed(tmp_path / "snapshots") < 0.4 * len(ids):
            assert job.poll() is None, job.communicate()[0]
            assert time.monotonic() < deadline, "no progress"
            samples.append((time.monotonic(), received(api)))
            time.sleep(0.1)
        kill_group(job)
        killed_run_calls = api.settled_calls()
        samples.append((time.monotonic(), received(api)))
        code, log = run_job(args)
        assert code == 0, log
        total = received(api)
        calls = api.calls_per_key()
    data, dead, summary = read_output(tmp_path / "out")
    assert dead == [] and Counter(r["id"] for r in data) == Counter(ids)
    one_interval = most_in_one_interval(samples)
    print(
        f"\nAPI received {total} ({killed_run_calls} from the killed run), summary counts "
        f"{summary['requests_made']}; one interval holds up to {one_interval} calls"
    )
    assert total == sum(calls.values())
    assert total - one_interval <= summary["requests_made"] <= total
    accounting = summary["accounting"]
    assert accounting["calls"] == "lower_bound"
    assert 1 <= accounting["attempts_cut_short"] <= 2  # the killed run's two tasks
