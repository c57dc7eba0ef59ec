"""The Spark job publishing into a Delta or an Iceberg table end to end (``--output-format``): real
runs against the demo API on loopback, read back with delta-rs and Polars, engines that
know nothing of this job. A retry after success commits nothing; a run killed right after
its commit landed (before its summary) is retried into the same one commit; inline dead
letters are typed columns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from demo.stack import demo_api
from spark_jobs.defaults import summary_location
from spark_jobs.driver.current_result import read_result
from spark_jobs.driver.delta_publish import IDENTITY_KEY

from .job_support import ROOT, job_args, run_job, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAY = "2026-12-01T00:00:00+00:00"
IDS = [f"k{i:03d}" for i in range(60)]
BAD = ['{"id": null, "event_time": 1}']
# The driver dies (as by SIGKILL: no clean-up, no summary) the moment its commits landed.
KILLED_AFTER_COMMIT = """
import os, sys
from spark_jobs.driver import table_publish
table_publish.write_summary = lambda *_: os._exit(137)
from spark_jobs.driver.job import main
sys.exit(main(sys.argv[1:]))
"""


def delta_args(tmp: Path, api_url: str, *extra: str) -> list[str]:
    table = ["--output-format", "delta", "--interval-start", DAY, "--partitions", "2"]
    return job_args(tmp, api_url, *table, *extra)


def run_commits(table: Path) -> list[dict]:
    return [c for c in DeltaTable(str(table)).history() if IDENTITY_KEY in c]


def test_a_delta_run_is_one_commit_and_a_retry_after_success_adds_none(tmp_path: Path) -> None:
    write_input(tmp_path / "in" / "part.jsonl", IDS, extra_lines=BAD)
    with demo_api() as api:
        code, log = run_job(delta_args(tmp_path, api.url))
        assert code == 0, log[-3000:]
        again, again_log = run_job(delta_args(tmp_path, api.url))
        assert again == 0 and "already complete: run" in again_log, again_log[-3000:]
    table, dead = tmp_path / "out", tmp_path / "out_dead_letters"
    frame = pl.read_delta(str(table))
    assert sorted(frame["id"].to_list()) == IDS
    assert set(frame["interval_start"].to_list()) == {DAY}
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == len(IDS)
    assert pl.read_delta(str(dead))["error"].to_list()[0].startswith("InvalidRowError: ")
    assert len(run_commits(table)) == 1 and len(run_commits(dead)) == 1
    summary = read_result(summary_location(str(table), "delta", DAY)).summary
    assert summary["table"]["data"] == {"uri": str(table), "version": 0, "committed": True}
    assert summary["table"]["identity"] == f"manual/enrich/{DAY}@1"


def test_a_run_killed_after_its_commit_landed_is_retried_into_that_commit(tmp_path: Path) -> None:
    write_input(tmp_path / "in" / "part.jsonl", IDS, extra_lines=BAD)
    with demo_api() as api:
        args = delta_args(tmp_path, api.url)
        killed = subprocess.run(
            [sys.executable, "-c", KILLED_AFTER_COMMIT, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert killed.returncode == 137, killed.stdout[-3000:] + killed.stderr[-3000:]
        folder = Path(summary_location(str(tmp_path / "out"), "delta", DAY))
        assert folder.is_dir() and not (folder / "_SUMMARY.json").exists()
        calls = sum(api.calls_per_key().values())
        code, log = run_job(args)
        assert code == 0, log[-3000:]
        assert sum(api.calls_per_key().values()) == calls, "the retry replays, pays nothing"
    table = tmp_path / "out"
    assert sorted(pl.read_delta(str(table))["id"].to_list()) == IDS
    assert len(run_commits(table)) == 1
    assert len(run_commits(tmp_path / "out_dead_letters")) == 1
    published = read_result(summary_location(str(table), "delta", DAY)).summary["table"]["data"]
    assert published == {"uri": str(table), "version": 0, "committed": False}


def test_inline_dead_letters_are_typed_columns_of_the_table(tmp_path: Path) -> None:
    write_input(tmp_path / "in" / "part.jsonl", IDS, extra_lines=BAD)
    with demo_api() as api:
        code, log = run_job(delta_args(tmp_path, api.url, "--dead-letter-layout", "inline"))
        assert code == 0, log[-3000:]
    table = DeltaTable(str(tmp_path / "out"))
    schema = table.to_pyarrow_table().schema
    assert schema.field("_status").type == pa.string()
    assert schema.field("_error").type == pa.string()
    assert schema.field("_attempts").type == pa.int64()
    frame = pl.read_delta(str(tmp_path / "out"))
    assert frame["_status"].null_count() == 0 and frame["_attempts"].null_count() == 0
    outcomes = frame.group_by("_status").len().sort("_status").rows()
    assert outcomes == [("dead_letter", 1), ("enriched", len(IDS))]
    failed = frame.filter(pl.col("_status") == "dead_letter")
    assert failed["_error"].to_list()[0].startswith("InvalidRowError: ")
    assert failed["name"].to_list() == [None]
    assert not (tmp_path / "out_dead_letters").exists()


def test_an_iceberg_run_is_one_snapshot_read_by_pyiceberg_and_polars(tmp_path: Path) -> None:
    """The embedded SQLite catalog beside the table; the interval column is in the
    files Spark wrote; each file's rows in the manifests are the rows the write counted
    for its task, its footer's (no footer read to commit); a retry after success adds
    no snapshot."""
    import pyarrow.parquet as pq
    from pyiceberg.catalog import load_catalog

    from spark_jobs.driver.iceberg_publish import IDENTITY, default_catalog

    write_input(tmp_path / "in" / "part.jsonl", IDS, extra_lines=BAD)
    iceberg = ["--output-format", "iceberg", "--write-mode", "replace-interval"]
    with demo_api() as api:
        code, log = run_job(delta_args(tmp_path, api.url, *iceberg))
        assert code == 0, log[-3000:]
        again, again_log = run_job(delta_args(tmp_path, api.url, *iceberg))
        assert again == 0 and "already complete: run" in again_log, again_log[-3000:]
    catalog = load_catalog("enrichment", **default_catalog(str(tmp_path / "out")))
    table = catalog.load_table("enrichment.out")
    scanned = table.scan().to_arrow()
    assert sorted(scanned["id"].to_pylist()) == IDS
    assert set(scanned["interval_start"].to_pylist()) == {DAY}
    assert sorted(pl.scan_iceberg(table).collect()["id"].to_list()) == IDS
    identities = [s.summary.get(IDENTITY) for s in table.snapshots()]
    assert identities == [f"manual/enrich/{DAY}@1"]
    assert "Iceberg: reading the footers" not in log
    for name in ("enrichment.out", "enrichment.out_dead_letters"):
        files = catalog.load_table(name).inspect.files()
        paths, rows = files["file_path"].to_pylist(), files["record_count"].to_pylist()
        footers = [pq.read_metadata(path.removeprefix("file:")).num_rows for path in paths]
        assert rows == footers and sum(rows) > 0, (name, paths)
    dead = catalog.load_table("enrichment.out_dead_letters").scan().to_arrow()
    assert dead["error"].to_pylist()[0].startswith("InvalidRowError: ")
    summary = read_result(summary_location(str(tmp_path / "out"), "iceberg", DAY)).summary
    assert summary["table"]["data"]["version"] == table.current_snapshot().snapshot_id
