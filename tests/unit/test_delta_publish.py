"""Publishing a run into a real Delta table on the local filesystem, exactly once: a kill
at each step of the publish followed by a retry, and a zombie beside the retry, leave
every record in the table once and one commit per publish; Polars, a reader no one here
wrote, sees the same rows."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from spark_jobs.driver.delta_publish import (
    DataInterval,
    TableIdentity,
    commit_files,
    run_folder_root,
)
from spark_jobs.driver.publish import staging_for
from spark_jobs.snapshots import LeaseError

IDENTITY = TableIdentity("dag/enrich/2026-12-01", 1)


def always() -> bool:
    return True


def never() -> bool:
    return False


def spark_write(
    table: Path, run_id: str, ids: range, files: int = 3, interval: DataInterval | None = None
) -> str:
    """What a run's Spark write leaves in the table's folder: several Parquet files in
    its own run folder, with Spark's ``_SUCCESS`` marker beside them."""
    data = Path(staging_for(run_folder_root(str(table), interval), run_id)) / "data"
    data.mkdir(parents=True)
    rows = list(ids)
    for part in range(files):
        chunk = rows[part::files]
        pq.write_table(
            pa.table({"id": chunk, "name": [f"n{i}" for i in chunk]}),
            data / f"part-{part:05d}.parquet",
        )
    (data / "_SUCCESS").touch()
    return str(data)


def commits(table: Path) -> list[dict[str, object]]:
    """The table's log, oldest first: one entry per commit."""
    return sorted(DeltaTable(str(table)).history(), key=lambda entry: int(entry["version"]))


def ids_in(table: Path) -> list[int]:
    return sorted(pl.read_delta(str(table))["id"].to_list())


def test_one_commit_adds_every_file_of_the_run_with_its_app_transaction(tmp_path: Path) -> None:
    table = tmp_path / "customers"
    data = spark_write(table, "run-1", range(10))
    result = commit_files(str(table), data, IDENTITY, always)
    assert (result.committed, result.files, result.table_version) == (True, 3, 0)
    assert ids_in(table) == list(range(10))
    assert DeltaTable(str(table)).transaction_version(IDENTITY.app_id) == 1
    log = (table / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    txn = [json.loads(line)["txn"] for line in log if '"txn"' in line]
    assert txn[0]["appId"] == IDENTITY.app_id and txn[0]["version"] == 1


@pytest.mark.parametrize("kill", ["commit answered", "summary written"])
def test_a_retry_after_the_commit_landed_commits_nothing(tmp_path: Path, kill: str) -> None:
    """The first try's commit is in the log but its answer (or its summary) was lost:
    the retry writes its own files again and finds its identity in the table."""
    table = tmp_path / "customers"
    commit_files(str(table), spark_write(table, "try-1", range(10)), IDENTITY, always)
    retry = commit_files(str(table), spark_write(table, "try-2", range(10)), IDENTITY, always)
    assert (retry.committed, retry.table_version) == (False, 0)
    assert ids_in(table) == list(range(10))
    assert len(commits(table)) == 1


def test_a_kill_after_the_files_were_written_leaves_them_invisible(tmp_path: Path) -> None:
    """Killed before its commit: the try's files sit in the folder, no commit names
    them, and the retry's one commit is what every reader sees."""
    table = tmp_path / "customers"
    commit_files(str(table), spark_write(table, "day-0", range(100, 105)), IDENTITY, always)
    spark_write(table, "try-1", range(10))  # killed here
    second = TableIdentity(IDENTITY.app_id, 2)
    retry = commit_files(str(table), spark_write(table, "try-2", range(10)), second, always)
    assert retry.committed
    assert ids_in(table) == [*range(10), *range(100, 105)]
    assert len(commits(table)) == 2


def test_a_zombie_beside_the_retry_commits_nothing(tmp_path: Path) -> None:
    """The zombie try of the same publish, fenced or not: once the retry committed, its
    identity is in the log; while fenced off, its lease check stops it first."""
    table = tmp_path / "customers"
    zombie_files = spark_write(table, "zombie", range(10))
    commit_files(str(table), spark_write(table, "retry", range(10)), IDENTITY, always)
    assert not commit_files(str(table), zombie_files, IDENTITY, always).committed
    with pytest.raises(LeaseError, match="fenced off"):
        commit_files(str(table), zombie_files, TableIdentity(IDENTITY.app_id, 2), never)
    assert ids_in(table) == list(range(10))
    assert len(commits(table)) == 1


def test_a_folder_outside_the_table_is_refused(tmp_path: Path) -> None:
    data = spark_write(tmp_path / "elsewhere", "run", range(3))
    with pytest.raises(ValueError, match="not inside the table's folder"):
        commit_files(str(tmp_path / "customers"), data, IDENTITY, always)


DAY_1, DAY_2 = DataInterval("day", "2026-12-01"), DataInterval("day", "2026-12-02")


def test_replacing_an_interval_reruns_a_day_without_duplicating_it(tmp_path: Path) -> None:
    """A Clear of day 1 after day 2 was published: day 1's rows are the re-run's, once;
    day 2's stay; the re-run is one commit of its own."""
    table = tmp_path / "customers"
    for interval, ids in ((DAY_1, range(5)), (DAY_2, range(10, 13))):
        identity = TableIdentity(f"dag/enrich/{interval.value}", 1)
        data = spark_write(table, interval.value, ids, interval=interval)
        commit_files(str(table), data, identity, always, interval=interval)
    rerun = TableIdentity(f"dag/enrich/{DAY_1.value}", 2)
    data = spark_write(table, "clear", range(3), interval=DAY_1)
    result = commit_files(str(table), data, rerun, always, interval=DAY_1, mode="replace-interval")
    assert result.committed
    frame = pl.read_delta(str(table)).sort("id")
    assert frame["id"].to_list() == [0, 1, 2, 10, 11, 12]
    assert frame["day"].to_list() == [DAY_1.value] * 3 + [DAY_2.value] * 3
    assert len(commits(table)) == 3


def test_replacing_needs_an_interval(tmp_path: Path) -> None:
    data = spark_write(tmp_path / "customers", "run", range(3))
    with pytest.raises(ValueError, match="data interval column"):
        commit_files(str(tmp_path / "customers"), data, IDENTITY, always, mode="replace-interval")


def test_an_interval_run_outside_its_partition_folder_is_refused(tmp_path: Path) -> None:
    """Engines that read partition values from paths (Polars) need ``day=<value>/``."""
    data = spark_write(tmp_path / "customers", "run", range(3))
    with pytest.raises(ValueError, match="day=2026-12-01"):
        commit_files(str(tmp_path / "customers"), data, IDENTITY, always, interval=DAY_1)
