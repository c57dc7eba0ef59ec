"""A request budget per run, through the real Spark job and a real API on loopback: each
run stops after its budget with exit status 4 and a summary of what is left, publishes no
partial output, and the runs together pay exactly what one unbudgeted run pays."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from demo.stack import demo_api
from spark_jobs.exit_status import ExitStatus

from .job_support import job_args, read_output, run_job, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

IDS = [f"k{i:04d}" for i in range(600)]


def test_budget_stops_resume_and_pay_exactly_once(tmp_path):
    write_input(tmp_path / "in" / "part.jsonl", IDS)
    args = job_args(tmp_path, None, "--partitions", "3", "--max-requests", "250")
    out = tmp_path / "out"
    with demo_api("--latency-ms", "5") as api:
        args += ["--url-template", api.url + "/customers/{id}"]
        for run, done in enumerate((250, 500)):
            code, log = run_job(args)
            assert code == ExitStatus.BUDGET_SPENT, log[-3000:]
            assert f"request budget spent: {done} of 600 records done, {600 - done} left" in log
            summary = json.loads((out / "_SUMMARY.json").read_text())
            assert summary["budget_exhausted"] is True
            assert (summary["records_done"], summary["records_left"]) == (done, 600 - done)
            assert summary["result"] is None, "no partial output is published"
            assert not list(out.rglob("*.parquet")), "no partial output is left"
            assert sum(api.calls_per_key().values()) == done, f"run {run} overspent"
        code, log = run_job(args)
        assert code == 0, log[-3000:]
        calls = api.calls_per_key()
    data, dead, summary = read_output(out)
    assert sorted(r["id"] for r in data) == IDS and not dead
    assert calls == Counter(IDS), "every key paid for exactly once over the three runs"
    assert "budget_exhausted" not in summary
