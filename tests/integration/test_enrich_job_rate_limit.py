"""The real Spark job (4 partitions on local[2]) against the demo API's hard rate limit,
with no --requests-per-second: the partitions find the limit on their own, each without
a coordinator, and no healthy record becomes a dead letter."""

from __future__ import annotations

import pytest

from demo.stack import demo_api

from .job_support import job_args, read_output, run_job, write_input

pytestmark = [pytest.mark.spark]

ROWS = 2000
LIMIT = 100  # requests/s over the whole API


def test_a_hard_rate_limit_costs_no_record_and_few_429s(tmp_path):
    write_input(tmp_path / "in" / "part.jsonl", [f"k{i:05d}" for i in range(ROWS)])
    knobs = ("--rate-limit", str(LIMIT), "--latency-ms", "20")
    with demo_api(*knobs) as api:
        args = job_args(tmp_path, api.url, "--partitions", "4", "--capacity", "64")
        code, log = run_job(args, env={"SPARK_MASTER": "local[2]"}, timeout=600)
        stats = api.get("/stats")
    assert code == 0, log[-5000:]
    data, dead, summary = read_output(tmp_path / "out")
    assert dead == [] and len(data) == ROWS
    assert summary["dead_letters"] == 0
    throttled = stats["by_status"].get("429", 0)
    print(f"\nrate limit {LIMIT}/s: {stats['total']} calls, {throttled} answered 429")
    assert throttled / stats["total"] <= 0.05, stats["by_status"]
    assert stats["by_status"]["200"] == ROWS
