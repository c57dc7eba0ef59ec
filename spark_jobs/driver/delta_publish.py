"""Publishing a run into a Delta Lake table exactly once, through delta-rs (no JVM jars).

Spark writes the run's Parquet files into a folder of its own inside the table's folder
(``<table>/runs/<run id>-<token>/data/``, :func:`~spark_jobs.driver.publish.staging_for`):
files no commit names are invisible to every Delta reader. The driver then adds them all
in ONE commit that carries a Delta app transaction (``txn``: an application id and a
version). Before committing it reads the table's last version for that application id:
a commit already in the log (its answer lost, the process killed before the summary, a
zombie try beside its retry) is found there and nothing is committed twice.

The application id names the snapshot namespace (one per dag, task and data interval);
the version is the namespace's publish sequence, so a later run of the same interval
that must publish again (a Clear after success) passes a higher one.

A commit costs a fixed number of requests whatever the run's size: one listing of the
run's data folder, one footer read for the schema, the log reads and the one commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from spark_jobs.defaults import WriteMode, interval_folder
from spark_jobs.driver.publish import FENCED
from spark_jobs.snapshots import LeaseError


@dataclass(frozen=True)
class TableIdentity:
    """Who commits: the Delta app transaction a run's commit carries."""

    app_id: str
    """The snapshot namespace of the run (``dag/task/interval``)."""
    version: int
    """The namespace's publish sequence: the same for every try of one publish."""

    @property
    def marker(self) -> str:
        """The identity as one string, in the commit's info (``IDENTITY_KEY``)."""
        return f"{self.app_id}@{self.version}"


@dataclass(frozen=True)
class DataInterval:
    """The partition column of the table that names a run's data interval, and this
    run's value of it. Delta keeps it in each file's ``add`` action (the files Spark
    wrote need not hold it); every reader sees it as a column."""

    column: str
    value: str


@dataclass(frozen=True)
class TableCommit:
    """What publishing did to the table: the version that holds the run's rows, whether
    this call wrote it (False: an earlier try of the same publish had), and how many of
    the run's staged files the commit names (none for a merge: delta-rs rewrote them)."""

    table: str
    table_version: int
    committed: bool
    files: int


def run_folder_root(table: str, interval: DataInterval | None) -> str:
    """Where a run's folders go inside the table's folder: with an interval, in its
    partition's folder (:func:`~spark_jobs.defaults.interval_folder`)."""
    if interval is None:
        return table.rstrip("/")
    return interval_folder(table, interval.column, interval.value)


def commit_files(
    table: str,
    data_folder: str,
    identity: TableIdentity,
    holds: Callable[[], bool],
    *,
    interval: DataInterval | None = None,
    mode: WriteMode = "append",
    merge: MergeKeys | None = None,
    storage_options: dict[str, str] | None = None,
) -> TableCommit:
    """Add the Parquet files of ``data_folder`` (inside ``table``'s folder) to the Delta
    table at ``table`` in one commit carrying ``identity``, unless the table already
    holds a commit of that identity. ``holds`` is the run's lease check: a run fenced
    off raises :class:`LeaseError` and commits nothing. With ``interval`` the table is
    partitioned by its column; ``replace-interval`` needs one, ``merge`` its keys."""
    if mode == "replace-interval" and interval is None:
        raise ValueError("replace-interval: the table needs a data interval column")
    if mode == "merge" and merge is None:
        raise ValueError("merge: the table needs the key columns and the enriched columns")
    from deltalake import CommitProperties, Transaction

    existing = _open(table, storage_options)
    if existing is not None:
        done = existing.transaction_version(identity.app_id)
        if done is not None and done >= identity.version:
            version = _version_of(existing, identity)
            return TableCommit(table, version, committed=False, files=0)
    actions, schema = _add_actions(table, data_folder, interval, storage_options)
    if not holds():
        raise LeaseError(FENCED)
    properties = CommitProperties(
        app_transactions=[Transaction(identity.app_id, identity.version)],
        custom_metadata={IDENTITY_KEY: identity.marker},
    )
    if existing is not None and mode == "merge" and merge is not None:
        _merge(existing, data_folder, schema, interval, merge, properties, storage_options)
        actions = []  # delta-rs wrote files of its own: the commit names none of the run's
    else:  # a merge into no table yet creates it with the run's files
        _commit_actions(
            table, existing, actions, schema, interval, mode, properties, storage_options
        )
    if existing is None:
        existing = _open(table, storage_options)
    else:
        existing.update_incremental()  # reads only the commits after the one it had
    return TableCommit(table, _version_of(existing, identity), committed=True, files=len(actions))


@dataclass(frozen=True)
class MergeKeys:
    """What ``merge`` matches on and what it changes: rows of a key already in the table
    get only ``updated`` (the enriched columns) from the run; new keys are added whole."""

    keys: tuple[str, ...]
    updated: tuple[str, ...]


IDENTITY_KEY = "enrichment.identity"
"""The commit info key that names the identity a commit carried, for finding its version."""
_HISTORY_SEARCHED = 100
"""Commits searched back for the one carrying an identity: bounded, whatever the age."""


def _commit_actions(
    table: str,
    existing: Any,
    actions: list[Any],
    schema: pa.Schema,
    interval: DataInterval | None,
    mode: WriteMode,
    properties: Any,
    storage_options: dict[str, str] | None,
) -> None:
    """The run's files added in one commit, the run's interval's files removed in the
    same one for ``replace-interval``; a table not there yet is created by it."""
    from deltalake import Schema
    from deltalake.transaction import create_table_with_add_actions

    partition_by = None if interval is None else [interval.column]
    if existing is None:
        create_table_with_add_actions(
            table,
            Schema.from_arrow(schema),
            actions,
            mode="append",
            partition_by=partition_by,
            storage_options=storage_options,
            commit_properties=properties,
        )
        return
    replaced = None
    if mode == "replace-interval" and interval is not None:
        replaced = [(interval.column, "=", interval.value)]
    existing.create_write_transaction(
        actions,
        mode="append" if replaced is None else "overwrite",
        schema=schema,
        partition_by=partition_by,
        partition_filters=replaced,
        commit_properties=properties,
    )


def _merge(
    existing: Any,
    data_folder: str,
    schema: pa.Schema,
    interval: DataInterval | None,
    merge: MergeKeys,
    properties: Any,
    storage_options: dict[str, str] | None,
) -> None:
    """The run's rows merged by key in one commit: delta-rs rewrites the files holding
    matched keys, streaming the run's files as the source (never all in memory)."""
    fs, folder = fsspec.core.url_to_fs(data_folder, **(storage_options or {}))
    source = ds.dataset(folder, filesystem=fs, format="parquet")  # _SUCCESS is skipped

    def batches() -> Any:
        for batch in source.to_batches():
            columns = batch.columns
            if interval is not None:
                columns.append(pa.array([interval.value] * batch.num_rows, pa.string()))
            yield pa.RecordBatch.from_arrays(columns, schema=schema)

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    on = " AND ".join(f"t.`{key}` = s.`{key}`" for key in merge.keys)
    updates = {column: f"s.`{column}`" for column in merge.updated}
    (
        existing.merge(reader, on, source_alias="s", target_alias="t", commit_properties=properties)
        .when_matched_update(updates=updates)
        .when_not_matched_insert_all()
        .execute()
    )


def _version_of(table: Any, identity: TableIdentity) -> int:
    """The table version whose commit carried ``identity`` (the latest commit, as a
    rule: one read; else searched among the last ones), else the table's latest: the
    version that holds the run's rows."""
    for limit in (1, _HISTORY_SEARCHED):
        for entry in table.history(limit=limit):
            if entry.get(IDENTITY_KEY) == identity.marker:
                return int(entry["version"])
    return int(table.version())


def last_transaction(
    table: str, app_id: str, storage_options: dict[str, str] | None = None
) -> int | None:
    """The highest version of ``app_id``'s app transaction in the table's log (None: no
    table, or no commit of that application yet)."""
    existing = _open(table, storage_options)
    return None if existing is None else existing.transaction_version(app_id)


def _open(table: str, storage_options: dict[str, str] | None) -> Any:
    """The Delta table at ``table``, or None when no table is there yet (one load of
    its log: asking first whether it is one would load it twice)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(table, storage_options=storage_options)
    except TableNotFoundError:
        return None


def _add_actions(
    table: str,
    data_folder: str,
    interval: DataInterval | None,
    storage_options: dict[str, str] | None,
) -> tuple[list[Any], pa.Schema]:
    """One ``add`` action per Parquet file of ``data_folder`` (one listing), paths
    relative to the table, and the table's schema: the files' (one footer: Spark wrote
    them all), and the interval column."""
    from deltalake.transaction import AddAction

    fs, root = fsspec.core.url_to_fs(table, **(storage_options or {}))
    _, folder = fsspec.core.url_to_fs(data_folder, **(storage_options or {}))
    root, folder = root.rstrip("/"), folder.rstrip("/")
    if not folder.startswith(f"{root}/"):
        raise ValueError(f"{data_folder} is not inside the table's folder {table}")
    expected = run_folder_root(root, interval)
    if not folder.startswith(f"{expected}/"):
        raise ValueError(f"{data_folder} is not inside its partition's folder {expected}")
    fs.invalidate_cache(folder)
    files = sorted(
        (entry for entry in fs.ls(folder, detail=True) if entry["name"].endswith(".parquet")),
        key=lambda entry: str(entry["name"]),
    )
    if not files:
        raise ValueError(f"{data_folder}: no Parquet files to commit")
    with fs.open(files[0]["name"], "rb") as handle:
        schema = pq.read_schema(handle)
    now = int(time.time() * 1000)
    actions = [
        AddAction(
            path=entry["name"][len(root) + 1 :],  # delta-rs encodes it for the log
            size=int(entry["size"]),
            partition_values={} if interval is None else {interval.column: interval.value},
            modification_time=now,
            data_change=True,
            stats="{}",
        )
        for entry in files
    ]
    schema = schema.remove_metadata()  # Spark's own footer metadata is no part of it
    if interval is not None:
        if interval.column in schema.names:
            raise ValueError(f"interval column {interval.column!r} is already a data column")
        schema = schema.append(pa.field(interval.column, pa.string()))
    return actions, schema
