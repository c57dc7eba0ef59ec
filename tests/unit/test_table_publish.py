"""A run published into real Delta tables on the local filesystem through the job's
publish step (``table_publish``) with a real snapshot namespace: a kill at each step
(files written, commit sent, commit answered, summary written) followed by a retry leaves
every record in the table once and one commit for the run in its history; a zombie beside
the retry commits nothing; the write modes and both dead-letter layouts. The kills are
the process dying at that step: the step's function raises instead of returning."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from deltalake import DeltaTable

from spark_jobs.driver import table_publish
from spark_jobs.driver.table_publish import TableRun, dead_letter_table, stage
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import LeaseError, NamespaceKey, SnapshotStore
from spark_jobs.spec.job_spec import JobSpec
from tests.table_support import (
    DAY,
    KEY,
    KILL_POINTS,
    dead,
    enriched,
    ids_in,
    killed_then_retried,
    publish_try,
    run_commits,
    spark_write,
    spec_for,
    staged,
)


def a_try(
    spec: JobSpec,
    rows: list[dict[str, Any]],
    failed: list[dict[str, Any]],
    holds: Callable[[], bool],
) -> JobSummary:
    """One try of the run's publish: Spark's write, then the driver's publish step."""
    return publish_try(staged(spec, rows, failed, files=2), len(rows) + len(failed), holds)


def always() -> bool:
    return True


def never() -> bool:
    return False


@pytest.mark.parametrize("kill", list(KILL_POINTS))
def test_a_kill_at_each_publish_step_then_a_retry_commits_the_run_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill: str
) -> None:
    spec = spec_for(str(tmp_path))
    one_try = partial(a_try, spec, enriched(range(10)), dead(range(2)), always)
    retry = killed_then_retried(monkeypatch, KILL_POINTS[kill], one_try)
    assert retry.table is not None
    for table, ids in ((spec.output, 10), (dead_letter_table(spec.output), 2)):
        assert len(ids_in(table)) == ids == len(set(ids_in(table)))
        assert len(run_commits(table)) == 1, DeltaTable(table).history()
    assert retry.table.data.version == 0
    landed = kill in ("commit answered", "summary written")
    assert retry.table.data.committed is not landed
    assert retry.table.identity == f"{KEY.dag_id}/{KEY.task_id}/{DAY}@1"
    if landed:
        staged = list(Path(spec.output).rglob("_SUCCESS"))
        assert len(staged) == 1, "the retry's files went: the first try's commit names its own"


def test_a_failure_after_the_commit_was_sent_keeps_the_files_it_may_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary's write fails after the commits landed: the job's clean-up leaves the
    committed files, so the table stays readable, and the retry commits nothing."""
    spec = spec_for(str(tmp_path))

    def storage_down(*_: Any) -> None:
        raise OSError("storage unreachable")

    with monkeypatch.context() as patch:
        patch.setattr(table_publish, "write_summary", storage_down)
        with pytest.raises(OSError):
            a_try(spec, enriched(range(10)), dead(range(2)), always)
    assert len(ids_in(spec.output)) == 10
    retry = a_try(spec, enriched(range(10)), dead(range(2)), always)
    assert retry.table is not None and not retry.table.data.committed
    assert len(ids_in(spec.output)) == 10 and len(run_commits(spec.output)) == 1


def test_a_zombie_beside_the_retry_commits_nothing(tmp_path: Path) -> None:
    """The zombie try of the same run, once the retry committed: fenced off, its lease
    check stops it before its summary; not yet fenced, the table's log holds the run's
    identity and it commits nothing."""
    spec = spec_for(str(tmp_path))
    a_try(spec, enriched(range(10)), dead(range(2)), always)
    with pytest.raises(LeaseError, match="fenced off"):
        a_try(spec, enriched(range(10)), dead(range(2)), never)
    zombie = a_try(spec, enriched(range(10)), dead(range(2)), always)
    assert zombie.table is not None and not zombie.table.data.committed
    assert ids_in(spec.output) == [f"k{i:03d}" for i in range(10)]
    assert len(run_commits(spec.output)) == 1


def test_a_fenced_run_fixes_no_publish_sequence(tmp_path: Path) -> None:
    spec = spec_for(str(tmp_path))
    with pytest.raises(LeaseError, match="fenced off"):
        a_try(spec, enriched(range(3)), dead(range(1)), never)
    assert SnapshotStore(spec.snapshot_dir).table_publish(KEY) is None
    assert not Path(spec.output, "_delta_log").exists()


def test_a_fresh_publish_of_the_interval_replaces_its_rows(tmp_path: Path) -> None:
    """A Clear after success (the namespace discarded): a new publish sequence, one new
    commit; ``replace-interval`` leaves the re-run's rows, the other day's untouched."""
    spec = spec_for(str(tmp_path), write_mode="replace-interval")
    a_try(spec, enriched(range(5)), dead(range(1)), always)
    other = spec_for(str(tmp_path), write_mode="replace-interval", interval_start="2026-11-30")
    store = SnapshotStore(spec.snapshot_dir)
    run = TableRun(other, store, NamespaceKey("dag", "enrich", "2026-11-30"), stage(other, "o"))
    spark_write(run.data, enriched(range(100, 103)), 2)
    spark_write(run.dead_letters, dead(range(7, 8)), 1)
    run.publish(JobSummary(records_in=4, enriched=3, dead_letters=1), always)
    store.discard(KEY)
    rerun = a_try(spec, enriched(range(3), name="again"), dead(range(1)), always)
    assert rerun.table is not None and rerun.table.identity.endswith("@2")
    frame = pl.read_delta(spec.output).sort("id")
    assert frame["id"].to_list() == ["k000", "k001", "k002", "k100", "k101", "k102"]
    assert frame["name"].to_list()[:3] == ["again0", "again1", "again2"]
    assert frame["interval_start"].to_list() == [DAY] * 3 + ["2026-11-30"] * 3
    assert ids_in(dead_letter_table(spec.output)) == ["d000", "d007"]
    assert len(run_commits(spec.output)) == 3


def test_merge_updates_only_the_enriched_columns_of_present_keys(tmp_path: Path) -> None:
    """Keys already in the table keep every input column as it was and get the run's
    enriched columns; new keys are added whole; one commit."""
    spec = spec_for(str(tmp_path), write_mode="merge")
    a_try(spec, enriched(range(3), name="old", amount="1"), dead(range(1)), always)
    SnapshotStore(spec.snapshot_dir).discard(KEY)
    a_try(spec, enriched(range(1, 5), name="new", amount="99"), dead(range(1)), always)
    rows = pl.read_delta(spec.output).sort("id").select("id", "amount", "name").rows()
    assert rows == [
        ("k000", "1", "old0"),
        ("k001", "1", "new1"),
        ("k002", "1", "new2"),
        ("k003", "99", "new3"),
        ("k004", "99", "new4"),
    ]
    assert len(run_commits(spec.output)) == 2
    staged = list(Path(spec.output).rglob("_SUCCESS"))
    assert len(staged) == 1, "the merged run's staged files went: delta-rs wrote its own"


def test_inline_dead_letters_need_no_table_beside(tmp_path: Path) -> None:
    spec = spec_for(str(tmp_path), dead_letter_layout="inline")
    rows = [{**row, "_status": "enriched", "_error": None} for row in enriched(range(3))]
    summary = a_try(spec, rows, [], always)
    assert summary.table is not None and summary.table.dead_letters is None
    assert not Path(dead_letter_table(spec.output)).exists()
    assert ids_in(spec.output) == ["k000", "k001", "k002"]
