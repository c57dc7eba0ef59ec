"""Publishing a run into an Apache Iceberg table exactly once, through pyiceberg (no JVM).

The counterpart of ``delta_publish.py`` for ``--output-format iceberg``: Spark writes the
run's Parquet files (the interval column in them: Iceberg keeps no partition values
outside the files) into a run folder inside the table's location; the driver adds them
in one catalog commit (a fast append) whose snapshot carries the run's identity as
snapshot properties (``enrichment.app_id``, ``enrichment.sequence``,
``enrichment.identity``). The table's snapshot history is checked for that identity
before the commit, and again after a commit whose outcome is unknown (its answer lost):
found there, it landed; so nothing is committed twice.

A publish costs the same requests whatever the number of files: each file's manifest
entry is built from the one listing of the run folder (its size) and the rows the write
counted for its task (``spark_io.TaskRows``), and one file's footer is read for the
schema check; the entries carry no column bounds (a reader cannot skip a file by
them before opening it). Files the write did not count (a task split into several files by
``spark.sql.files.maxRecordsPerFile``, a partitioned table of the user's) are added by
pyiceberg's ``add_files``, which reads every footer (three requests a file).

``replace-interval`` deletes the interval's rows and adds the run's files in one
transaction: one catalog commit holding an overwrite's delete snapshot and the append
snapshot (the identity on the append). ``merge`` is pyiceberg's upsert by key of the run's
rows, with the other columns of keys already there kept as they were (read first).

The catalog is any pyiceberg supports, by its properties (``iceberg_catalog``); by
default an embedded SQL catalog in a SQLite file beside the table, for a local table.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any

import fsspec
import pyarrow as pa

from spark_jobs.driver.delta_publish import DataInterval, MergeKeys, TableCommit, TableIdentity
from spark_jobs.driver.publish import FENCED
from spark_jobs.snapshots import LeaseError

logger = logging.getLogger(__name__)

APP_ID, SEQUENCE, IDENTITY = "enrichment.app_id", "enrichment.sequence", "enrichment.identity"
NAMESPACE = "enrichment"
"""The catalog namespace of a table whose identifier the spec does not give."""


@dataclass(frozen=True)
class IcebergTable:
    """Where an Iceberg output is: its catalog (pyiceberg properties), its identifier
    there, and its location (where its data and metadata files go)."""

    location: str
    identifier: str
    catalog: Mapping[str, str]

    def load(self) -> Any:
        """The table, or None when the catalog holds none of that identifier yet."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self._catalog().load_table(self.identifier)
        except NoSuchTableError:
            return None

    def create(self, schema: Any) -> Any:
        catalog = self._catalog()
        catalog.create_namespace_if_not_exists(self.identifier.rsplit(".", 1)[0])
        return catalog.create_table(self.identifier, schema, location=self.location)

    def _catalog(self) -> Any:
        from pyiceberg.catalog import load_catalog

        return load_catalog("enrichment", **dict(self.catalog))


def default_catalog(location: str) -> dict[str, str]:
    """An embedded SQL catalog: a SQLite file beside a local table's folder."""
    fs, path = fsspec.core.url_to_fs(location)
    if "file" not in fs.protocol and "local" not in fs.protocol:
        raise ValueError(
            f"{location}: the embedded SQLite catalog needs a local table; give a catalog "
            "(iceberg_catalog: its pyiceberg properties, e.g. type: rest, uri: ...)"
        )
    fs.makedirs(fs._parent(path), exist_ok=True)
    return {"type": "sql", "uri": f"sqlite:///{path.rstrip('/')}.catalog.db"}


def last_transaction(table: IcebergTable, app_id: str) -> int | None:
    """The highest publish sequence of ``app_id`` in the table's snapshot history."""
    loaded = table.load()
    if loaded is None:
        return None
    sequences = [
        int(snapshot.summary[SEQUENCE])
        for snapshot in loaded.snapshots()
        if snapshot.summary is not None and snapshot.summary.get(APP_ID) == app_id
    ]
    return max(sequences, default=None)


def commit_files(
    table: IcebergTable,
    data_folder: str,
    identity: TableIdentity,
    holds: Callable[[], bool],
    *,
    interval: DataInterval | None = None,
    mode: str = "append",
    merge: MergeKeys | None = None,
    task_rows: Mapping[int, int] | None = None,
) -> TableCommit:
    """Add the Parquet files of ``data_folder`` to ``table`` in one catalog commit whose
    snapshot carries ``identity``, unless its history holds that identity already; a
    commit whose outcome is unknown is looked for in the history again. ``task_rows``:
    the rows the write counted for each file's task (None: read from the footers)."""
    if mode == "replace-interval" and interval is None:
        raise ValueError("replace-interval: the table needs a data interval column")
    if mode == "merge" and merge is None:
        raise ValueError("merge: the table needs the key columns and the enriched columns")
    loaded = table.load()
    found = None if loaded is None else _snapshot_of(loaded, identity)
    if found is not None:
        return TableCommit(table.identifier, found, committed=False, files=0)
    files = _parquet_files(data_folder)
    if not holds():
        raise LeaseError(FENCED)
    merging = merge if loaded is not None and mode == "merge" else None
    written = RunFiles(files, _schema(files[0].url), task_rows)
    if loaded is None:  # a merge into no table yet creates it with the run's files
        loaded = table.create(written.schema)
    referenced = 0 if merging is not None else len(files)  # a merge writes files of its own
    replaced = interval if mode == "replace-interval" else None
    try:
        _commit(loaded, written, identity, replaced, merging)
    except Exception:
        landed = _snapshot_of(table.load(), identity)  # the outcome was unknown
        if landed is None:
            raise
        return TableCommit(table.identifier, landed, committed=True, files=referenced)
    version = _snapshot_of(table.load(), identity)
    assert version is not None, "a commit that landed is in the history"
    return TableCommit(table.identifier, version, committed=True, files=referenced)


@dataclass(frozen=True)
class StagedFile:
    """A Parquet file of the run folder, as its listing states it."""

    url: str
    size: int


@dataclass(frozen=True)
class RunFiles:
    """The run's files to commit: their listing, their schema (one footer read), and the
    rows the write counted for each file's task (None when it did not count)."""

    files: list[StagedFile]
    schema: pa.Schema
    task_rows: Mapping[int, int] | None

    @property
    def urls(self) -> list[str]:
        return [file.url for file in self.files]


def _commit(
    table: Any,
    written: RunFiles,
    identity: TableIdentity,
    replaced: DataInterval | None,
    merge: MergeKeys | None,
) -> None:
    """One catalog commit: the interval's rows deleted (``replace-interval``), the files
    added with the identity on their snapshot; or the run's rows merged by key."""
    from pyiceberg.expressions import EqualTo, Reference
    from pyiceberg.expressions.literals import literal

    properties = {
        APP_ID: identity.app_id,
        SEQUENCE: str(identity.version),
        IDENTITY: identity.marker,
    }
    if merge is not None:
        source = _merged_rows(table, written.urls, merge)
        table.upsert(source, join_cols=list(merge.keys), snapshot_properties=properties)
        return
    with table.transaction() as transaction:
        if replaced is not None:
            column, value = Reference(replaced.column), literal(replaced.value)
            transaction.delete(EqualTo(term=column, value=value))
        entries = _manifest_entries(transaction.table_metadata, written)
        if entries is None:
            logger.info("Iceberg: reading the footers of %d files", len(written.files))
            transaction.add_files(written.urls, snapshot_properties=properties)
            return
        _name_files_columns(transaction)
        with transaction.update_snapshot(snapshot_properties=properties).fast_append() as append:
            for entry in entries:
                append.append_data_file(entry)


def _manifest_entries(metadata: Any, written: RunFiles) -> list[Any] | None:
    """The run's files as manifest entries, from their listing and the rows the write
    counted, when these name each file's rows for certain: every file one write task's,
    all counted rows in the files, an unpartitioned table. None otherwise."""
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    named = [_task_of(file.url) for file in written.files]
    tasks = [task for task in named if task is not None]
    rows = written.task_rows
    if rows is None or len(tasks) != len(named) or len(set(tasks)) != len(tasks):
        return None
    if sum(rows.get(task, 0) for task in tasks) != sum(rows.values()):
        return None  # rows counted for a file the listing does not show
    if not metadata.spec().is_unpartitioned():
        return None
    _check_pyarrow_schema_compatible(  # what add_files checks of every file: one suffices
        metadata.schema(), written.schema, format_version=metadata.format_version
    )
    return [
        DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=file.url,
            file_format=FileFormat.PARQUET,
            partition=Record(),
            record_count=rows.get(task, 0),
            file_size_in_bytes=file.size,
            spec_id=metadata.default_spec_id,
        )
        for file, task in zip(written.files, tasks, strict=True)
    ]


_TASK_FILE = re.compile(r"part-(\d+)[-.]")
"""Spark's name of a write task's file: ``part-<partition id>-<uuid>-c000.<codec>.parquet``."""


def _task_of(url: str) -> int | None:
    found = _TASK_FILE.match(url.rsplit("/", 1)[-1])
    return None if found is None else int(found.group(1))


def _name_files_columns(transaction: Any) -> None:
    """Spark's files carry no Iceberg field ids: readers find their columns by name
    through the table's name mapping, set once (as ``add_files`` sets it)."""
    from pyiceberg.table import TableProperties

    metadata = transaction.table_metadata
    if metadata.name_mapping() is None:
        mapping = metadata.schema().name_mapping.model_dump_json()
        transaction.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING: mapping})


def _merged_rows(table: Any, files: list[str], merge: MergeKeys) -> Any:
    """The run's rows as the upsert gets them: a key already in the table keeps its
    other columns' values there, only ``merge.updated`` comes from the run (pyiceberg's
    upsert replaces whole rows). Reads the run's rows and the matched keys' rows."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from pyiceberg.expressions import And, In, Reference

    fs, _ = fsspec.core.url_to_fs(files[0])
    run = ds.dataset([fs._strip_protocol(f) for f in files], filesystem=fs).to_table()
    run = run.select(table.schema().column_names).cast(table.schema().as_arrow())
    keys, kept = list(merge.keys), [c for c in run.column_names if c not in merge.updated]
    wanted: list[Any] = [
        In(term=Reference(key), values=run[key].drop_null().to_pylist()) for key in keys
    ]
    present = reduce(And, wanted)  # a superset of the present keys with several columns
    there = table.scan(row_filter=present, selected_fields=tuple(kept)).to_arrow()
    there = there.select(kept).cast(pa.schema([run.schema.field(name) for name in kept]))
    there = there.append_column("_there", pa.array([True] * there.num_rows, pa.bool_()))
    joined = run.join(there, keys, join_type="left outer", right_suffix="__there")
    matched = pc.fill_null(joined["_there"], False)
    columns = {
        name: pc.if_else(matched, joined[f"{name}__there"], joined[name])
        if name in kept and name not in keys
        else joined[name]
        for name in run.column_names
    }
    return pa.table(columns, schema=run.schema)


def _snapshot_of(table: Any, identity: TableIdentity) -> int | None:
    """The id of the snapshot carrying ``identity`` (the table's version for readers:
    ``snapshot_id``), None when no snapshot does."""
    for snapshot in reversed(table.snapshots()):
        if snapshot.summary is not None and snapshot.summary.get(IDENTITY) == identity.marker:
            return int(snapshot.snapshot_id)
    return None


def _parquet_files(data_folder: str) -> list[StagedFile]:
    """The run's Parquet files and their sizes (one listing), as URLs pyiceberg opens."""
    fs, folder = fsspec.core.url_to_fs(data_folder)
    fs.invalidate_cache(folder)
    files = sorted(
        (str(entry["name"]), int(entry["size"]))
        for entry in fs.ls(folder, detail=True)
        if str(entry["name"]).endswith(".parquet")
    )
    if not files:
        raise ValueError(f"{data_folder}: no Parquet files to commit")
    return [StagedFile(fs.unstrip_protocol(name), size) for name, size in files]


def _schema(file: str) -> pa.Schema:
    """The table's schema from one of the run's files (Spark wrote them all)."""
    import pyarrow.parquet as pq

    with fsspec.open(file, "rb") as handle:
        return pq.read_schema(handle).remove_metadata()
