"""The job over Spark Connect: a real server (``connect_support``) whose Python workers
lack this project, so every run proves the job ships its own code. The same output as a
classic run (and a secret the server's executors lack, named up front); and a client
killed mid-run whose server-side tasks go on (a zombie) while a new client resumes:
exact, published by the new client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from demo.stack import demo_api

from .job_support import ROOT, job_args, read_output, run_job, start_job, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WORKER_HAS_PROJECT = """
import sys
from pyspark.sql import SparkSession, functions as F

def found(_):
    import importlib.util
    return str(importlib.util.find_spec("spark_jobs") is not None)

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
print("worker has spark_jobs:", spark.range(1).select(F.udf(found)("id")).first()[0])
spark.stop()
"""


def wait_until(check, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


def calls(api) -> int:
    return sum(api.calls_per_key().values())


def test_a_run_over_spark_connect_equals_the_classic_run(tmp_path, spark_connect):
    """Also: a secret only the client has is named before any call."""
    probe = subprocess.run(
        [sys.executable, "-c", WORKER_HAS_PROJECT, spark_connect.url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "worker has spark_jobs: False" in probe.stdout, probe.stdout + probe.stderr[-3000:]
    ids = [f"k{i:04d}" for i in range(1000)] + ["missing-1"]  # the demo API has no such key
    results = {}
    with demo_api("--latency-ms", "5") as api:
        for mode, env in (
            ("classic", {"SPARK_MASTER": "local[2]"}),
            ("connect", {"SPARK_REMOTE": spark_connect.url}),
        ):
            write_input(tmp_path / mode / "in" / "part.jsonl", ids)
            code, log = run_job(job_args(tmp_path / mode, api.url, "--partitions", "3"), env)
            assert code == 0, log[-5000:]
            results[mode] = read_output(tmp_path / mode / "out")
            assert ("shipped the job's code to the Spark Connect session" in log) == (
                mode == "connect"
            ), log[-3000:]
        api.post("/stats/reset")
        # The server's executors do not see the client's environment: the executor check
        # names a secret's variable only the client has, before any call.
        write_input(tmp_path / "secret" / "in" / "part.jsonl", ids[:10])
        args = job_args(tmp_path / "secret", api.url, "--token-env", "CLIENT_ONLY_TOKEN")
        env = {"SPARK_REMOTE": spark_connect.url, "CLIENT_ONLY_TOKEN": "cl13nt-s3cret"}
        secret_code, secret_log = run_job(args, env)
        assert api.calls_per_key() == {}
    assert secret_code == 3, secret_log[-3000:]
    assert "the executors lack the environment variable(s) CLIENT_ONLY_TOKEN" in secret_log
    assert "cl13nt-s3cret" not in secret_log
    (data, dead, summary), (classic_data, classic_dead, classic_summary) = (
        results["connect"],
        results["classic"],
    )
    by_id = lambda rows: sorted(rows, key=lambda row: row["id"])  # noqa: E731
    assert by_id(data) == by_id(classic_data) and len(data) + len(dead) == len(ids)
    assert by_id(dead) == by_id(classic_dead)
    for count in ("records_in", "enriched", "dead_letters", "requests_made"):
        assert summary[count] == classic_summary[count], count


ROWS = 6_000
FENCED = "fenced off: another run holds this namespace now"
IDS = [f"k{i:05d}" for i in range(ROWS)]


def test_a_killed_connect_client_resumes_exactly_while_its_server_tasks_go_on(
    tmp_path, spark_connect
):
    """SIGKILL of the client: its tasks on the server keep calling the API and
    committing (nothing tells them); the new client waits for the dead one's lease to
    expire, takes over and resumes, and the old tasks are fenced off at their next
    commit. Every record once, published by the new client."""
    write_input(tmp_path / "in" / "part.jsonl", IDS)
    with demo_api("--latency-ms", "40") as api:
        args = job_args(
            tmp_path, api.url, "--partitions", "2", "--capacity", "5", "--lease-ttl", "3"
        )
        args += ["--remote", spark_connect.url]
        first = start_job([*args, "--run-id", "first"])
        wait_until(lambda: calls(api) >= ROWS // 4 or first.poll() is not None, 300, "progress")
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate(timeout=30)
        at_kill = calls(api)
        # The zombie: the dead client's tasks still call the API.
        wait_until(lambda: calls(api) > at_kill + 50, 60, "the killed client's tasks to go on")
        second = start_job([*args, "--run-id", "second"])
        log, _ = second.communicate(timeout=600)
        total = api.settled_calls()
        per_key = api.calls_per_key()
    assert second.returncode == 0, log[-5000:]
    assert "taking over the expired lease of run first" in log and "resuming epoch" in log
    data, dead, summary = read_output(tmp_path / "out")
    assert Counter(r["id"] for r in data + dead) == Counter(IDS), "every record exactly once"
    assert summary["run_id"] == "second" and not dead and set(per_key) == set(IDS)
    if summary["replayed_from_snapshot"] < ROWS:  # the zombie was still at work: fenced off
        assert FENCED in spark_connect.log.read_text(), "the killed client's tasks went on"
    # The bill counts every call each attempt recorded, the zombie's up to its last cut.
    assert summary["requests_made"] <= total
    print(
        f"\nkilled at {at_kill} calls; repeated calls after the kill: {total - ROWS} "
        f"(calls {total} - records {ROWS}); replayed from snapshots "
        f"{summary['replayed_from_snapshot']}; billed {summary['requests_made']} "
        f"({summary['accounting']['calls']})"
    )
