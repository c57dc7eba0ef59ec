"""Budgets that follow the tasks that run, through the real Spark job (``local[2]``) and
the demo API on loopback: more partitions than task slots still send about
``--requests-per-second``, and a skewed partition finishes on ``--max-requests`` that
suffices in total, where an equal share per partition would have stopped it."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from demo.stack import demo_api

from .job_support import job_args, read_output, run_job, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

LOCAL_2 = {"SPARK_MASTER": "local[2]"}
RATE = 100.0
PARTITIONS = 32


def steady_rate(per_second: dict[str, dict[str, int]]) -> float:
    """Requests per second arriving at the server, a second without any counting as 0,
    its first and last two seconds (the job starting, its last tasks draining) left out."""
    seconds = sorted(int(s) for s in per_second)
    counts = [sum(per_second.get(str(s), {}).values()) for s in range(seconds[0], seconds[-1] + 1)]
    steady = counts[2:-2]
    assert len(steady) >= 10, f"too short a run to measure: {counts}"
    return sum(steady) / len(steady)


def test_more_partitions_than_slots_still_send_the_whole_rate(tmp_path):
    ids = [f"k{i:05d}" for i in range(int(RATE * 25))]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    extra = ("--partitions", str(PARTITIONS), "--requests-per-second", str(RATE))
    with demo_api("--latency-ms", "5") as api:
        code, log = run_job(job_args(tmp_path, api.url, *extra), env=LOCAL_2)
        assert code == 0, log[-3000:]
        stats = api.get("/stats")
    assert "2 of 32 partitions run at once (spark.master local[2])" in log
    rate = steady_rate(stats["per_second"])
    print(f"arrived: {rate:.1f} requests/s of --requests-per-second {RATE:g} ({rate / RATE:.3f})")
    # A share per partition (R/32 each, two running) could never pass R/16.
    assert rate > RATE / 8, stats["per_second"]
    assert rate <= RATE * 1.1, "the given rate stays a ceiling"
    data, dead, _ = read_output(tmp_path / "out")
    assert len(data) == len(ids) and not dead


def test_a_skewed_partition_finishes_on_a_budget_that_suffices(tmp_path):
    """360 calls over 4 partitions, 300 of them in one partition (one hot ``grp``); a
    budget of 380 would give each partition 95 split equally."""
    rows = [{"grp": "hot", "id": f"h{i:03d}"} for i in range(300)]
    rows += [{"grp": f"g{i:02d}", "id": f"c{i:02d}"} for i in range(60)]
    source = tmp_path / "in" / "part.jsonl"
    source.parent.mkdir(parents=True)
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    extra = ("--key-column", "grp", "--partitions", "4", "--max-requests", "380")
    with demo_api("--latency-ms", "5") as api:
        code, log = run_job(job_args(tmp_path, api.url, *extra), env=LOCAL_2)
        calls = api.calls_per_key()
    assert code == 0, log[-3000:]
    data, dead, summary = read_output(tmp_path / "out")
    assert sorted(r["id"] for r in data) == sorted(r["id"] for r in rows) and not dead
    assert calls == Counter(r["id"] for r in rows), "every key paid for once"
    assert "budget_exhausted" not in summary
