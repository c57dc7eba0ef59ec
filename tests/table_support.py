"""Shared by the tests that publish into real Delta tables (local filesystem, moto S3):
a kill at each step of the publish, rows as a run's Spark write stages them, one try of
the driver's publish step, and what a reader sees of the table."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import fsspec
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from spark_jobs.driver import delta_publish, table_publish
from spark_jobs.driver.delta_publish import IDENTITY_KEY
from spark_jobs.driver.spark_io import TaskRows
from spark_jobs.driver.table_publish import TableRun, stage
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.spec.job_spec import JobSpec

DAY = "2026-12-01T00:00:00+00:00"
KEY = NamespaceKey("dag", "enrich", DAY)


class Killed(BaseException):
    """The process died here (BaseException: no ``except Exception`` of ours sees it)."""


def die_before(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
    def killed(*_: Any, **__: Any) -> Any:
        raise Killed(name)

    monkeypatch.setattr(owner, name, killed)


def die_after(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
    real = getattr(owner, name)

    def killed(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise Killed(name)

    monkeypatch.setattr(owner, name, killed)


#: The steps of a publish, each as the place the process dies: before the driver's
#: publish step (Spark's files written), before the first commit reaches the log (the
#: sequence fixed: the commit sent, never landed), between the dead-letter table's commit
#: and the data table's, after the commits landed (answered, no summary yet), after the
#: summary (no completion record yet).
KILL_POINTS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "data files written": lambda mp: die_before(mp, TableRun, "publish"),
    "commit sent": lambda mp: die_before(mp, delta_publish, "_commit_actions"),
    "one of two tables committed": lambda mp: die_after(mp, delta_publish, "_commit_actions"),
    "commit answered": lambda mp: die_before(mp, table_publish, "write_summary"),
    "summary written": lambda mp: die_after(mp, table_publish, "write_summary"),
}


def spec_for(root: str, **options: Any) -> JobSpec:
    """A job publishing ``KEY``'s run into the Delta table ``<root>/customers``."""
    values = {
        "input": f"{root}/in",
        "output": f"{root}/customers",
        "key_column": "id",
        "snapshot_dir": f"{root}/snapshots",
        "url_template": "http://api/customers/{id}",
        "response_fields": ["name=$.name"],
        "output_format": "delta",
        "dag_id": KEY.dag_id,
        "task_id": KEY.task_id,
        "interval_start": DAY,
        **options,
    }
    return JobSpec.from_mapping(values, source="test")


def spark_write(folder: str | None, rows: list[dict[str, Any]], files: int) -> dict[int, int]:
    """What a run's Spark write leaves in a staging folder: Parquet parts named by their
    task as Spark names them, _SUCCESS; returns the rows of each task, as the job counts
    them (``spark_io.TaskRows``)."""
    assert folder is not None
    fs, path = fsspec.core.url_to_fs(folder)
    fs.makedirs(path, exist_ok=True)
    schema = pa.schema([(name, pa.string()) for name in rows[0]])
    for part in range(files):
        with fs.open(f"{path}/part-{part:05d}-{uuid.uuid4()}-c000.parquet", "wb") as handle:
            pq.write_table(pa.Table.from_pylist(rows[part::files], schema), handle)
    fs.pipe_file(f"{path}/_SUCCESS", b"")
    return {part: len(rows[part::files]) for part in range(files) if rows[part::files]}


def staged(
    spec: JobSpec,
    rows: list[dict[str, Any]],
    failed: list[dict[str, Any]],
    files: int = 3,
    counted: bool = True,
) -> TableRun:
    """A run's table output after its Spark write: ``KEY``'s namespace, files staged,
    and the rows of each file as the write counted them (``counted``, as the job does for
    an Iceberg output; else none, and Iceberg reads the footers)."""
    run = TableRun(spec, SnapshotStore(spec.snapshot_dir), KEY, stage(spec, "run"))
    data = spark_write(run.data, rows, files)
    dead = {} if run.dead_letters is None else spark_write(run.dead_letters, failed, 1)
    if counted:
        run.task_rows = TaskRows(data, dead)
    return run


def killed_then_retried(
    monkeypatch: pytest.MonkeyPatch,
    kill: Callable[[pytest.MonkeyPatch], None],
    one_try: Callable[[], JobSummary],
) -> JobSummary:
    """One try killed at ``kill``, then its retry (which it returns)."""
    with monkeypatch.context() as patch:
        kill(patch)
        with pytest.raises(Killed):
            one_try()
    return one_try()


def enriched(ids: range, name: str = "n", amount: str = "1") -> list[dict[str, Any]]:
    return [{"id": f"k{i:03d}", "amount": amount, "name": f"{name}{i}"} for i in ids]


def dead(ids: range) -> list[dict[str, Any]]:
    return [{"id": f"d{i:03d}", "amount": "1", "error": "InvalidRowError: bad"} for i in ids]


def publish_try(run: TableRun, records: int, holds: Callable[[], bool]) -> JobSummary:
    """The driver's publish step of one try, cleaning up as the job does (``finally``),
    unless the process was killed: then nothing of it cleans up."""
    summary = JobSummary(records_in=records, enriched=records, dead_letters=0)
    try:
        summary = run.publish(summary, holds)
    except Killed:
        raise
    except BaseException:
        run.discard()
        raise
    run.discard()
    return summary


def run_commits(table: str) -> list[dict[str, Any]]:
    """The table's commits that carried a run's identity."""
    return [c for c in DeltaTable(table).history() if IDENTITY_KEY in c]


def ids_in(table: str) -> list[str]:
    """The ids Polars, a reader no one here wrote, sees in the table."""
    return sorted(pl.read_delta(table)["id"].to_list())
