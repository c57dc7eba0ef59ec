"""Publishing a run into a table output (``--output-format delta``), exactly once.

Spark writes the run's files into run folders inside the tables' own folders
(:func:`stage`): files no commit names are invisible to every reader. The driver then
commits them (``delta_publish.py``) carrying the run's identity: the app id names the
snapshot namespace (dag, task, data interval), the version is the namespace's publish
sequence. That sequence is fixed in the namespace (``table_publish.json``) before the first
commit is sent, one past what the table's log holds for the app id, so every later try of
the same publish (after a kill at any step, or a zombie beside the retry) commits with the
same identity, and the table's log says whether it landed: nothing is committed twice.

The dead-letter table (``<output>_dead_letters``) commits first, the data table second,
the summary naming both versions last (in the interval's partition folder,
``defaults.summary_location``); the completion record the job then
writes makes a retry after success a no-op without reading the tables. A fresh start
(``--resume never``, a discard) clears the namespace: its publish is a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from spark_jobs.defaults import DEAD_LETTER_TABLE_SUFFIX, WriteMode, summary_location
from spark_jobs.driver import delta_publish, iceberg_publish
from spark_jobs.driver.delta_publish import (
    DataInterval,
    MergeKeys,
    TableCommit,
    TableIdentity,
    run_folder_root,
)
from spark_jobs.driver.publish import FENCED, discard, staging_for, write_summary
from spark_jobs.driver.spark_io import TaskRows
from spark_jobs.records.summary import JobSummary, TablePublish, TableVersion
from spark_jobs.snapshots import LeaseError, NamespaceKey, SnapshotStore
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.output_options import INLINE_COLUMNS


@dataclass(frozen=True)
class TableStaging:
    """Where the run's Spark write puts its files: a run folder in the data table's
    interval folder, and one in the dead-letter table's (None: dead letters inline)."""

    data: str
    dead_letters: str | None


def dead_letter_table(output: str) -> str:
    """The dead-letter table beside the data table."""
    return f"{output.rstrip('/')}{DEAD_LETTER_TABLE_SUFFIX}"


def stage(spec: JobSpec, run_id: str) -> TableStaging:
    """The run's staging folders (``data`` inside each run folder)."""
    interval = _interval(spec)
    data = f"{staging_for(run_folder_root(spec.output, interval), run_id)}/data"
    if spec.dead_letter_layout == "inline":
        return TableStaging(data, None)
    dead_root = run_folder_root(dead_letter_table(spec.output), interval)
    return TableStaging(data, f"{staging_for(dead_root, run_id)}/data")


@dataclass
class TableRun:
    """One run's table output, as the job drives it: where Spark writes, the commits,
    and the clean-up of staged files no commit can reference."""

    spec: JobSpec
    store: SnapshotStore
    key: NamespaceKey
    staging: TableStaging
    unreferenced: set[str] = field(default_factory=set)
    """Staged folders no commit names, for certain: those never sent, those whose
    commit had landed before (a retry), a merge's source. A commit whose answer never
    came may name its files: they stay (unreferenced files are invisible; vacuum)."""
    task_rows: TaskRows | None = None
    """The rows of each staged file, as the write counted them (an Iceberg output's:
    ``write_outputs``); None, and Iceberg reads the files' footers."""

    def __post_init__(self) -> None:
        self.unreferenced = {f for f in (self.data, self.dead_letters) if f is not None}

    @property
    def data(self) -> str:
        return self.staging.data

    @property
    def dead_letters(self) -> str | None:
        return self.staging.dead_letters

    def publish(self, summary: JobSummary, holds: Callable[[], bool]) -> JobSummary:
        """Commit the staged run to its tables once, then write the summary naming the
        versions; returns it. A run stopped by its budget commits nothing (partial rows
        are no result); a run fenced off raises :class:`LeaseError`."""
        spec, output = self.spec, self.spec.output
        location = summary_location(
            output, spec.output_format, spec.interval_start, spec.interval_column
        )
        if summary.budget is not None:
            write_summary(location, summary)  # what the next try resumes
            return summary
        tables = [output] if self.dead_letters is None else [dead_letter_table(output), output]
        app_id = f"{self.key.dag_id}/{self.key.task_id}/{self.key.interval_start}"
        identity = TableIdentity(
            app_id, _sequence(spec, self.store, self.key, tables, app_id, holds)
        )
        dead, rows = None, self.task_rows
        if self.dead_letters is not None:
            dead_rows = None if rows is None else rows.dead_letters
            dead = self._commit(tables[0], self.dead_letters, identity, holds, None, dead_rows)
        data_rows = None if rows is None else rows.data
        data = self._commit(output, self.data, identity, holds, _merge_keys(spec), data_rows)
        summary = replace(
            summary, table=TablePublish(spec.output_format, identity.marker, data, dead)
        )
        if not holds():
            raise LeaseError(FENCED)
        write_summary(location, summary)
        return summary

    def set_aside(self, summary: JobSummary) -> None:
        """A rejected run (dead-letter ceiling) commits nothing; its snapshots stay."""

    def discard(self) -> None:
        for folder in self.unreferenced:
            discard(folder.rsplit("/", 1)[0])

    def _commit(
        self,
        table: str,
        folder: str,
        identity: TableIdentity,
        holds: Callable[[], bool],
        merge: MergeKeys | None,
        task_rows: Mapping[int, int] | None,
    ) -> TableVersion:
        """One table's commit (a dead-letter table only ever appends or replaces)."""
        mode = (
            self.spec.write_mode
            if merge is not None or self.spec.write_mode != "merge"
            else "append"
        )
        self.unreferenced.discard(folder)  # from here on the log may name its files
        staged = StagedCommit(table, folder, identity, mode, merge, task_rows)
        done = table_format(self.spec).commit(staged, holds)
        if done.files == 0:  # found committed before, or merged (delta-rs wrote its own)
            self.unreferenced.add(folder)
        return TableVersion(table, done.table_version, done.committed)


def _sequence(
    spec: JobSpec,
    store: SnapshotStore,
    key: NamespaceKey,
    tables: list[str],
    app_id: str,
    holds: Callable[[], bool],
) -> int:
    """The namespace's publish sequence: the one fixed by an earlier try of this
    publish, else one past the highest the tables' logs hold for ``app_id``, fixed now
    (only by the run holding the lease)."""
    fixed = store.table_publish(key)
    if fixed is not None:
        return fixed
    found = table_format(spec).last_transaction
    sequence = 1 + max(found(table, app_id) or 0 for table in tables)
    if not holds():
        raise LeaseError(FENCED)
    store.write_table_publish(key, sequence)
    return sequence


@dataclass(frozen=True)
class StagedCommit:
    """One table's commit of a run's staged files: what every format is asked."""

    table: str
    folder: str
    identity: TableIdentity
    mode: WriteMode
    merge: MergeKeys | None
    task_rows: Mapping[int, int] | None = None
    """The rows of each staged file by its write task, when the write counted them."""


class TableFormat(Protocol):
    """What publishing needs of a table format: the last publish sequence an app id
    committed, and one commit of a run's staged files carrying its identity."""

    def last_transaction(self, table: str, app_id: str) -> int | None: ...

    def commit(self, staged: StagedCommit, holds: Callable[[], bool]) -> TableCommit: ...


@dataclass(frozen=True)
class DeltaFormat:
    """Delta Lake through delta-rs (``delta_publish.py``): the table is its location."""

    interval: DataInterval

    def last_transaction(self, table: str, app_id: str) -> int | None:
        return delta_publish.last_transaction(table, app_id)

    def commit(self, staged: StagedCommit, holds: Callable[[], bool]) -> TableCommit:
        return delta_publish.commit_files(
            staged.table,
            staged.folder,
            staged.identity,
            holds,
            interval=self.interval,
            mode=staged.mode,
            merge=staged.merge,
        )


@dataclass(frozen=True)
class IcebergFormat:
    """Apache Iceberg through pyiceberg (``iceberg_publish.py``): a table location names
    a table of the configured catalog (the data table's identifier, or it with the
    dead-letter suffix)."""

    spec: JobSpec

    def last_transaction(self, table: str, app_id: str) -> int | None:
        return iceberg_publish.last_transaction(self._table(table), app_id)

    def commit(self, staged: StagedCommit, holds: Callable[[], bool]) -> TableCommit:
        table, interval = self._table(staged.table), _interval(self.spec)
        return iceberg_publish.commit_files(
            table,
            staged.folder,
            staged.identity,
            holds,
            interval=interval,
            mode=staged.mode,
            merge=staged.merge,
            task_rows=staged.task_rows,
        )

    def _table(self, location: str) -> iceberg_publish.IcebergTable:
        spec = self.spec
        name = spec.iceberg_table or f"{iceberg_publish.NAMESPACE}.{_basename(spec.output)}"
        if location != spec.output:
            name += DEAD_LETTER_TABLE_SUFFIX
        catalog = spec.iceberg_catalog or iceberg_publish.default_catalog(spec.output)
        return iceberg_publish.IcebergTable(location, name, catalog)


def table_format(spec: JobSpec) -> TableFormat:
    if spec.output_format == "iceberg":
        return IcebergFormat(spec)
    return DeltaFormat(_interval(spec))


def _basename(location: str) -> str:
    return location.rstrip("/").rsplit("/", 1)[-1]


def _merge_keys(spec: JobSpec) -> MergeKeys | None:
    """What ``merge`` matches and updates: the key columns; the enriched columns (and an
    inline outcome's, which the run decided afresh)."""
    if spec.write_mode != "merge":
        return None
    updated = tuple(spec.response_fields)
    if spec.dead_letter_layout == "inline":
        updated += INLINE_COLUMNS
    return MergeKeys(spec.key_columns, updated)


def _interval(spec: JobSpec) -> DataInterval:
    return DataInterval(spec.interval_column, spec.interval_start)
