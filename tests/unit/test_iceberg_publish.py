"""A run published into real Iceberg tables (pyiceberg, the embedded SQLite catalog, the
local filesystem) through the job's publish step: a kill at each step then a retry leaves
every record once and one snapshot carrying the run's identity; a commit whose answer was
lost is found in the history afterwards; a zombie beside the retry commits nothing;
replace-interval; merge by key; both dead-letter layouts. Read back with pyiceberg and Polars."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from pyiceberg.catalog import load_catalog

from spark_jobs.driver import iceberg_publish, table_publish
from spark_jobs.driver.table_publish import TableRun, stage
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import LeaseError, NamespaceKey, SnapshotStore
from spark_jobs.spec.job_spec import JobSpec
from tests.table_support import (
    DAY,
    KEY,
    dead,
    die_after,
    die_before,
    enriched,
    killed_then_retried,
    publish_try,
    spark_write,
    spec_for,
    staged,
)

KILL_POINTS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "data files written": lambda mp: die_before(mp, TableRun, "publish"),
    "commit sent": lambda mp: die_before(mp, iceberg_publish, "_commit"),
    "one of two tables committed": lambda mp: die_after(mp, iceberg_publish, "_commit"),
    "commit answered": lambda mp: die_before(mp, table_publish, "write_summary"),
    "summary written": lambda mp: die_after(mp, table_publish, "write_summary"),
}


def iceberg_spec(tmp: Path, **options: Any) -> JobSpec:
    return spec_for(str(tmp), output_format="iceberg", **options)


def with_day(rows: list[dict[str, Any]], day: str = DAY) -> list[dict[str, Any]]:
    """Rows as Spark writes them for Iceberg: the interval column in the files."""
    return [{**row, "interval_start": day} for row in rows]


def a_try(spec: JobSpec, ids: range, holds: Callable[[], bool] = lambda: True) -> JobSummary:
    rows, failed = with_day(enriched(ids)), with_day(dead(range(2)))
    return publish_try(staged(spec, rows, failed, files=2), len(rows) + len(failed), holds)


def table(spec: JobSpec, suffix: str = "") -> Any:
    catalog = load_catalog("enrichment", **iceberg_publish.default_catalog(spec.output))
    return catalog.load_table(f"enrichment.customers{suffix}")


def run_snapshots(spec: JobSpec, suffix: str = "") -> list[str]:
    """The identities the table's snapshots carry, oldest first."""
    summaries = [s.summary for s in table(spec, suffix).snapshots()]
    return [s[iceberg_publish.IDENTITY] for s in summaries if iceberg_publish.IDENTITY in s]


def ids_in(spec: JobSpec, suffix: str = "") -> list[str]:
    """The ids as pyiceberg scans them, checked against Polars, a second reader."""
    scanned = sorted(table(spec, suffix).scan().to_arrow()["id"].to_pylist())
    assert sorted(pl.scan_iceberg(table(spec, suffix)).collect()["id"].to_list()) == scanned
    return scanned


@pytest.mark.parametrize("kill", list(KILL_POINTS))
def test_a_kill_at_each_publish_step_then_a_retry_commits_the_run_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill: str
) -> None:
    spec = iceberg_spec(tmp_path)
    retry = killed_then_retried(monkeypatch, KILL_POINTS[kill], partial(a_try, spec, range(10)))
    assert retry.table is not None and retry.table.format == "iceberg"
    assert ids_in(spec) == [f"k{i:03d}" for i in range(10)]
    assert ids_in(spec, "_dead_letters") == ["d000", "d001"]
    identity = f"{KEY.dag_id}/{KEY.task_id}/{DAY}@1"
    assert run_snapshots(spec) == [identity] == run_snapshots(spec, "_dead_letters")
    assert retry.table.data.version == table(spec).current_snapshot().snapshot_id
    assert retry.table.data.committed is (kill not in ("commit answered", "summary written"))


def test_a_commit_whose_answer_was_lost_is_found_in_the_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog took the commit, the answer never came: the history says it landed,
    and the publish goes on as committed, without a second commit."""
    spec = iceberg_spec(tmp_path)
    real = iceberg_publish._commit

    def answer_lost(*args: Any) -> None:
        real(*args)
        raise OSError("connection reset before the catalog's answer")

    with monkeypatch.context() as patch:
        patch.setattr(iceberg_publish, "_commit", answer_lost)
        summary = a_try(spec, range(5))
    assert summary.table is not None and summary.table.data.committed
    assert len(run_snapshots(spec)) == 1 and ids_in(spec) == [f"k{i:03d}" for i in range(5)]


def test_a_zombie_beside_the_retry_commits_nothing(tmp_path: Path) -> None:
    spec = iceberg_spec(tmp_path)
    a_try(spec, range(10))
    with pytest.raises(LeaseError, match="fenced off"):
        a_try(spec, range(10), holds=lambda: False)
    zombie = a_try(spec, range(10))
    assert zombie.table is not None and not zombie.table.data.committed
    assert len(run_snapshots(spec)) == 1 and len(ids_in(spec)) == 10


def test_replacing_the_interval_leaves_the_reruns_rows_and_other_days(tmp_path: Path) -> None:
    spec = iceberg_spec(tmp_path, write_mode="replace-interval")
    a_try(spec, range(5))
    other = iceberg_spec(tmp_path, write_mode="replace-interval", interval_start="2026-11-30")
    store = SnapshotStore(spec.snapshot_dir)
    run = TableRun(other, store, NamespaceKey("dag", "enrich", "2026-11-30"), stage(other, "o"))
    spark_write(run.data, with_day(enriched(range(100, 102)), "2026-11-30"), 1)
    spark_write(run.dead_letters, with_day(dead(range(7, 8)), "2026-11-30"), 1)
    publish_try(run, 3, lambda: True)
    store.discard(KEY)  # a Clear of the first day: a new publish
    rerun = a_try(spec, range(3))
    assert rerun.table is not None and rerun.table.identity.endswith("@2")
    assert ids_in(spec) == ["k000", "k001", "k002", "k100", "k101"]


def test_inline_dead_letters_in_the_one_table(tmp_path: Path) -> None:
    spec = iceberg_spec(tmp_path, dead_letter_layout="inline")
    rows = [{**row, "_status": "enriched", "_error": None} for row in with_day(enriched(range(3)))]
    summary = publish_try(staged(spec, rows, [], files=1), 3, lambda: True)
    assert summary.table is not None and summary.table.dead_letters is None
    assert ids_in(spec) == ["k000", "k001", "k002"]


def test_merge_updates_only_the_enriched_columns_of_present_keys(tmp_path: Path) -> None:
    """Keys already in the table keep their other columns and get the run's enriched
    columns; new keys are added; one snapshot carries the merge's identity."""
    spec = iceberg_spec(tmp_path, write_mode="merge")
    old = with_day(enriched(range(3), name="old", amount="1"))
    publish_try(staged(spec, old, with_day(dead(range(1))), files=2), 4, lambda: True)
    SnapshotStore(spec.snapshot_dir).discard(KEY)
    new = with_day(enriched(range(1, 5), name="new", amount="99"))
    merged = publish_try(staged(spec, new, with_day(dead(range(1))), files=2), 5, lambda: True)
    rows = pl.scan_iceberg(table(spec)).select("id", "amount", "name").sort("id").collect()
    assert rows.rows() == [
        ("k000", "1", "old0"),
        ("k001", "1", "new1"),
        ("k002", "1", "new2"),
        ("k003", "99", "new3"),
        ("k004", "99", "new4"),
    ]
    assert merged.table is not None and merged.table.identity.endswith("@2")
    assert run_snapshots(spec)[-1] == merged.table.identity
    staged_left = list(Path(spec.output).rglob("_SUCCESS"))
    assert len(staged_left) == 1, "the merged run's staged files went: pyiceberg wrote its own"


def manifest_rows(spec: JobSpec) -> dict[str, int]:
    """Each data file's rows as the table's manifests state them, by file name."""
    files = table(spec).inspect.files()
    paths, rows = files["file_path"].to_pylist(), files["record_count"].to_pylist()
    return {path.rsplit("/", 1)[-1]: count for path, count in zip(paths, rows, strict=True)}


def footer_rows(spec: JobSpec) -> dict[str, int]:
    """Each committed file's rows as its own footer says."""
    import pyarrow.parquet as pq

    paths = table(spec).inspect.files()["file_path"].to_pylist()
    footers = {path: pq.read_metadata(path.removeprefix("file://")) for path in paths}
    return {path.rsplit("/", 1)[-1]: footer.num_rows for path, footer in footers.items()}


def test_the_rows_the_write_counted_are_each_files_rows_in_the_manifest(tmp_path: Path) -> None:
    """The manifest entries are built from the write's counts, not the footers: each
    file's record count is the rows it holds, and readers that count from the manifests
    (pyiceberg's ``count``) agree with a scan."""
    spec = iceberg_spec(tmp_path)
    rows, failed = with_day(enriched(range(11))), with_day(dead(range(2)))
    run = staged(spec, rows, failed, files=4)
    publish_try(run, 13, lambda: True)
    assert manifest_rows(spec) == footer_rows(spec)
    assert sorted(manifest_rows(spec).values()) == [2, 3, 3, 3]
    assert table(spec).scan().count() == 11 == len(ids_in(spec))


@pytest.mark.parametrize("counts", ["a task without its file", "none", "a task in two files"])
def test_counts_that_do_not_name_each_files_rows_are_read_from_the_footers(
    tmp_path: Path, counts: str
) -> None:
    """Counts that cannot be each file's rows for certain (a counted task whose file the
    listing lacks, no counts at all, one task's rows in two files) are not trusted: the
    files' footers are read, and the manifest states their true rows."""
    spec = iceberg_spec(tmp_path)
    rows, failed = with_day(enriched(range(9))), with_day(dead(range(2)))
    run = staged(spec, rows, failed, files=3, counted=counts != "none")
    assert run.task_rows is not None or counts == "none"
    if counts == "a task without its file":
        run.task_rows = replace(run.task_rows, data={**run.task_rows.data, 7: 5})
    if counts == "a task in two files":
        run.task_rows = replace(run.task_rows, data={0: 9})
        for path in Path(run.data).glob("part-0000[12]-*"):
            path.rename(path.with_name(path.name.replace("part-0000", "part-00000-x")))
    publish_try(run, 11, lambda: True)
    assert manifest_rows(spec) == footer_rows(spec)
    assert table(spec).scan().count() == 9 == len(ids_in(spec))
