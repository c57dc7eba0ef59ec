"""The job on a real standalone cluster with speculative execution: a straggler
partition gets a second attempt running at the same time; snapshots stay valid and the
output is exact."""

from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql import functions as F

from spark_jobs.snapshots.commit_file import decode_commit

from .job_support import job_args, read_output, run_job, write_input
from .spark_cluster import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]
PARTITIONS = 4


def ids_by_partition(spark, candidates: list[str]) -> dict[int, list[str]]:
    """Which of our partitions each id lands in (Spark's HashPartitioning: pmod(murmur3))."""
    frame = spark.createDataFrame([(c,) for c in candidates], ["id"])
    rows = frame.select("id", F.expr(f"pmod(hash(id), {PARTITIONS})").alias("p")).collect()
    placed: dict[int, list[str]] = {}
    for row in rows:
        placed.setdefault(row["p"], []).append(row["id"])
    return placed


def test_speculative_attempts_never_corrupt_snapshots(tmp_path, spark):
    # The original attempt needs 40 x 3 s, the copy 40 x 0.3 s (slow_lookup): the copy
    # commits and wins even when a loaded machine starts it late.
    slow = ids_by_partition(spark, [f"slow{i:04d}" for i in range(400)])[0][:40]
    fast_by_partition = ids_by_partition(spark, [f"fast{i:04d}" for i in range(800)])
    fast = [key for p in range(1, PARTITIONS) for key in fast_by_partition[p][:60]]
    ids = slow + fast
    write_input(tmp_path / "in" / "part.jsonl", ids)
    args = job_args(
        tmp_path,
        None,
        "--enricher",
        "demo.functions:slow_lookup",
        "--partitions",
        str(PARTITIONS),
        "--capacity",
        "1",
        "--keep-snapshots",
    )
    args[args.index("--response-field") + 1] = "name=$.tier"
    speculation = " ".join(
        f"--conf {k}={v}"
        for k, v in {
            "spark.speculation": "true",
            "spark.speculation.interval": "100ms",
            "spark.speculation.multiplier": "1.2",
            "spark.speculation.quantile": "0.5",
            "spark.speculation.minTaskRuntime": "500ms",
        }.items()
    )
    with standalone_cluster(tmp_path) as master:
        code, log = run_job(
            args,
            env={
                "SPARK_MASTER": master,
                "SPARK_LOCAL_IP": "127.0.0.1",
                "PYSPARK_SUBMIT_ARGS": f"{speculation} pyspark-shell",
            },
        )
    assert code == 0, log
    data, dead, summary = read_output(tmp_path / "out")
    assert dead == [] and Counter(r["id"] for r in data) == Counter(ids)
    commits = list((tmp_path / "snapshots").rglob("part-00000/commits/*.snap"))
    attempts = {
        decode_commit(c.read_bytes(), f"commits/{c.name}", 0).manifest.attempt.rsplit("-", 1)[-1]
        for c in commits
    }
    assert {"a0", "a1"} <= attempts, f"no speculative attempt ran: {attempts}\n{log[-6000:]}"
    assert summary["records_in"] == len(ids)
