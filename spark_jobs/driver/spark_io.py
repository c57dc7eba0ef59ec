"""The Spark side of the job: deterministic partitioning, output schema, writing (reading
is ``input_reader``'s).

Kept apart from the driver's flow so each step is small and named, and so the rules that
make resume exact (fixed partition count, key hash, total order within a partition) live
in one place.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.partition_runner import ATTEMPTS_COLUMN, ERROR_COLUMN
from spark_jobs.partition_runner.row_enrichment import HELPER_COLUMNS, SOURCE_FILE
from spark_jobs.spec.input_options import CORRUPT_RECORD
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.model_options import model_config, output_types
from spark_jobs.spec.output_options import DEAD_LETTER, ENRICHED, STATUS_COLUMN
from spark_jobs.spec.spec_error import SpecError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

ARROW_TYPES = {
    "string": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "json": pa.string(),
}


def partition_deterministically(frame: DataFrame, spec: JobSpec) -> DataFrame:
    """N partitions by the hash of the key columns, each sorted by them and then every
    other column: the same rows in the same order whatever the cluster size or the input
    split, so a non-unique key is safe. Rows equal in every column may swap places, which
    changes nothing in the output."""
    from pyspark.sql import functions as F

    keys = spec.key_columns
    others = [c for c in frame.columns if c not in (*keys, SOURCE_FILE)]
    order = [F.col(c).asc_nulls_first() for c in keys] + [
        F.col(c).cast("string").asc_nulls_first() for c in others
    ]
    by = [F.col(c) for c in keys]
    return frame.repartition(spec.partitions, *by).sortWithinPartitions(*order)


def partition_sizes(frame: DataFrame, spec: JobSpec) -> dict[int, int]:
    """Rows per partition of :func:`partition_deterministically` (for progress and the
    summary's ``records_in``), counted where the rows are read: the partition of a row is
    ``pmod(hash(key columns), partitions)``, the very expression of Spark's hash
    partitioning, so only one count per partition and input split crosses the shuffle,
    never the rows."""
    from pyspark.sql import functions as F

    key_hash = F.hash(*[F.col(c) for c in spec.key_columns])
    partition = F.pmod(key_hash, F.lit(spec.partitions)).alias("p")
    rows = frame.groupBy(partition).count().collect()
    return {row["p"]: row["count"] for row in rows}


def output_arrow_schema(input_schema: StructType, spec: JobSpec) -> pa.Schema:
    """Input columns (helpers dropped) + enrichment fields + error + attempts."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    kept = StructType([f for f in input_schema.fields if f.name not in HELPER_COLUMNS])
    clashes = set(spec.response_fields) & set(kept.fieldNames())
    if clashes:
        raise SpecError(f"--response-field: {sorted(clashes)} already exist as input columns")
    fields = list(to_arrow_schema(kept))
    model = model_config(spec)
    types = output_types(model) if model is not None else {}  # a model's are its schema's
    fields += [
        pa.field(name, types.get(name) or ARROW_TYPES[f.type])
        for name, f in spec.response_fields.items()
    ]
    fields += [pa.field(ERROR_COLUMN, pa.string()), pa.field(ATTEMPTS_COLUMN, pa.int64())]
    return pa.schema(fields)


@dataclass(frozen=True)
class TaskRows:
    """The rows each write task of a run wrote, by its partition id (the ``part-NNNNN``
    of the file Spark names for it): what an Iceberg manifest states of each file, known
    without reading the files back (``iceberg_publish``)."""

    data: Mapping[int, int]
    dead_letters: Mapping[int, int]


@dataclass(frozen=True)
class OutputCounts:
    """The records a run's output holds: enriched (``data/``) and dead letters; and, for
    an Iceberg output, the rows of each file written."""

    enriched: int
    dead_letters: int
    task_rows: TaskRows | None = None
    first_error: str | None = None
    """A dead letter's error when every row is one: what the failed run names."""


def write_outputs(
    enriched: DataFrame, spec: JobSpec, data: str, dead_letters: str | None
) -> OutputCounts:
    """The enriched rows as Parquet in folder ``data`` and the dead letters in folder
    ``dead_letters``, or every row in ``data`` with its outcome inline (``_status``,
    ``_error``, ``_attempts``: ``dead_letters`` None), computed once (cached; a lost cache
    block is recomputed from the snapshots, without calling the API again).

    The counts are observed as the rows go into the write of ``data``, before its filter
    (``DataFrame.observe``): every row, and the dead letters among them, with no job of
    their own. The observation sits in the write's result stage, whose tasks' metrics
    Spark merges once per partition, a retried or speculative task's included."""
    from pyspark import StorageLevel
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    if spec.output_format == "iceberg":  # Iceberg keeps partition values in the files only
        enriched = enriched.withColumn(spec.interval_column, F.lit(spec.interval_start))
    cached = enriched.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        failed = F.col(ERROR_COLUMN).isNotNull()
        counted = Observation("enrich_job_output")
        observed = cached.observe(
            counted, F.count(F.lit(1)).alias("rows"), F.count_if(failed).alias("failed")
        )
        bookkeeping = [CORRUPT_RECORD] if CORRUPT_RECORD in cached.columns else []
        if dead_letters is None:
            status = F.when(failed, F.lit(DEAD_LETTER)).otherwise(F.lit(ENRICHED))
            inline = observed.drop(*bookkeeping).withColumn(STATUS_COLUMN, status)
            inline.write.mode("overwrite").parquet(data)
        else:
            bookkeeping += [ERROR_COLUMN, ATTEMPTS_COLUMN]
            observed.filter(~failed).drop(*bookkeeping).write.mode("overwrite").parquet(data)
        counts = counted.get
        rows, failures = int(counts["rows"]), int(counts["failed"])
        if dead_letters is not None:
            _write_dead_letters(cached.filter(failed), spec, dead_letters, failures)
        task_rows = None
        if spec.output_format == "iceberg":
            data_rows = cached if dead_letters is None else cached.filter(~failed)
            task_rows = TaskRows(_rows_by_task(data_rows), _rows_by_task(cached.filter(failed)))
        first_error = None
        if rows and rows == failures:  # nothing enriched: the run fails naming an error
            first = cached.select(ERROR_COLUMN).first()
            first_error = None if first is None else str(first[0])
    finally:
        cached.unpersist()
    return OutputCounts(rows - failures, failures, task_rows, first_error)


def _rows_by_task(frame: DataFrame) -> dict[int, int]:
    """The rows of each partition of ``frame``, counted over the cached rows the write
    read (one small job, no storage read): the rows of the file its write task wrote."""
    from pyspark.sql import functions as F

    counted = frame.groupBy(F.spark_partition_id().alias("task")).count().collect()
    return {int(row["task"]): int(row["count"]) for row in counted}


def _write_dead_letters(dead: DataFrame, spec: JobSpec, folder: str, failures: int) -> None:
    """The dead letters without the enriched columns, their error and attempts named as
    every reader of ``dead_letters/`` knows them."""
    dead = dead.drop(*spec.response_fields)
    dead = dead.withColumnRenamed(ERROR_COLUMN, "error").withColumnRenamed(
        ATTEMPTS_COLUMN, "attempts"
    )
    if failures or not write_empty_parquet(folder, dead.schema):
        dead.write.mode("overwrite").parquet(folder)


_SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
_SPARK_VERSION_KEY = b"org.apache.spark.version"


def write_empty_parquet(directory: str, schema: StructType) -> bool:
    """``directory`` as Spark writes a DataFrame without rows (one Parquet file of the
    schema, Spark's schema in its footer as Spark puts it there, and ``_SUCCESS``), in
    a few milliseconds instead of a Spark job's 0.7 s; False, writing nothing, when the
    schema holds a type whose Parquet form Spark's writer chooses for itself (timestamps,
    decimals, maps): Spark writes those."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if not all(_plain(field.dataType) for field in schema.fields):
        return False
    from pyspark import __version__

    footer = {_SPARK_SCHEMA_KEY: schema.json().encode(), _SPARK_VERSION_KEY: __version__}
    arrow = to_arrow_schema(schema).with_metadata(footer)
    fs, path = fsspec.core.url_to_fs(directory)
    fs.makedirs(path, exist_ok=True)
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    with fs.open(f"{path.rstrip('/')}/{name}", "wb") as file:
        pq.write_table(arrow.empty_table(), file, compression="snappy")
    fs.pipe_file(f"{path.rstrip('/')}/_SUCCESS", b"")
    return True


def _plain(data_type: Any) -> bool:
    """A type pyarrow writes to Parquet as Spark does: strings, binary, booleans,
    integers, floating point and dates, and structs and arrays of them."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.StructType):
        return all(_plain(field.dataType) for field in data_type.fields)
    if isinstance(data_type, T.ArrayType):
        return _plain(data_type.elementType)
    plain = (T.StringType, T.BinaryType, T.BooleanType, T.LongType, T.IntegerType)
    return isinstance(data_type, (*plain, T.DoubleType, T.FloatType, T.DateType))


def input_fingerprint(frame: DataFrame) -> dict[str, list[Any]]:
    """Every input file with its size and modification time: a changed file changes it.
    Spark names the files by URI, percent-encoded (a space is ``%20``, a ``%`` is
    ``%25``); the filesystem wants the path itself."""
    files: dict[str, list[Any]] = {}
    for url in sorted(frame.inputFiles()):
        fs, path = fsspec.core.url_to_fs(unquote(url))
        info = fs.info(path)
        files[url] = [info.get("size"), str(info.get("mtime") or info.get("LastModified") or "")]
    return files
