"""A partition of many rows runs with flat Python worker memory (measured by the runner at
every snapshot and reported in the manifests). ``MEMORY_ROWS`` sets the size: 300 000 by
default (a leak of 200 bytes a record would show as 57 MiB), 1 000 000 for the size the
memory target names."""

from __future__ import annotations

import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.snapshots.commit_file import decode_commit

from .job_support import job_args, run_job

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROWS = int(os.environ.get("MEMORY_ROWS", "300000"))


def test_a_long_partition_keeps_worker_memory_flat(tmp_path):
    (tmp_path / "in").mkdir()
    ids = pa.array([f"k{i:07d}" for i in range(ROWS)])
    pq.write_table(
        pa.table({"id": ids, "amount": pa.array(range(ROWS))}), tmp_path / "in" / "p.parquet"
    )
    args = job_args(
        tmp_path,
        None,
        "--input-format",
        "parquet",
        "--enricher",
        "demo.functions:lookup",
        "--partitions",
        "1",
        "--capacity",
        "200",
        "--snapshot-interval",
        "2",
        "--keep-snapshots",
        "--progress-interval",  # a line every half second: three even on a fast run
        "0.5",
    )
    args[args.index("name=$.name")] = "name=$.tier"
    code, log = run_job(args, timeout=600)
    assert code == 0, log[-3000:]
    progress = re.findall(rf"partition 0: (\d+)/{ROWS} \(\d+%\), (\d+) rec/s, (\d+) in flight", log)
    assert len(progress) >= 3, "per-partition progress lines in the driver log"
    summary = json.loads((tmp_path / "out" / "_SUMMARY.json").read_text())
    assert summary["records_in"] == ROWS == summary["enriched"]
    commits = sorted((tmp_path / "snapshots").rglob("part-00000/commits/*.snap"))
    stats = [decode_commit(c.read_bytes(), f"commits/{c.name}", 0).manifest.stats for c in commits]
    assert len(stats) >= 5, "expected several snapshots over the run"
    final = max(stats, key=lambda s: s["rss_mb_peak"])
    first, peak = final["rss_mb_first_cut"], final["rss_mb_peak"]
    print(f"python worker RSS: first cut {first} MiB, peak {peak} MiB")
    growth = peak - first
    assert growth < 64, f"worker memory grew by {growth:.0f} MiB over {ROWS} rows"
