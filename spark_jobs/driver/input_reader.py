"""Reading the input on the driver: exactly what the files hold, checked against the spec.

The reader options are the job's (``input_options.READER_DEFAULTS``: CSV per RFC 4180,
PERMISSIVE with a corrupt-record column) under the user's ``input_options``. Then, before
the job record is written or any task starts, every column the spec names (key, event
time, each ``{field}`` of the URL and body templates) is checked against the schema Spark
read, so a typo fails in seconds, naming the option, instead of dead-lettering every row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.partition_runner.row_enrichment import EVENT_MS, SOURCE_FILE
from spark_jobs.spec.input_options import CORRUPT_RECORD, reader_options
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.spec_error import SpecError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


def read_input(spark: SparkSession, spec: JobSpec) -> DataFrame:
    """The input with the runner's helper columns (source file, event time in ms)."""
    from pyspark.errors import AnalysisException

    options = reader_options(spec.input_format, spec.input_options)
    try:
        if spec.input_format == "csv":
            frame = _read_csv(spark, spec.input, options)
        else:
            reader = spark.read.options(**options).format(_SPARK_FORMATS[spec.input_format])
            frame = reader.load(spec.input)
    except AnalysisException as error:
        raise SpecError(f"--input {spec.input}: {str(error).splitlines()[0]}") from None
    check_columns(frame.columns, spec)
    return with_helper_columns(frame, spec)


def with_helper_columns(frame: DataFrame, spec: JobSpec) -> DataFrame:
    """The runner's helper columns: the source file, the event time in ms (also added to
    the rows a dead-letter retry reads back from an earlier output)."""
    from pyspark.sql import functions as F

    frame = frame.withColumn(SOURCE_FILE, F.input_file_name())
    if spec.event_time_column:
        frame = frame.withColumn(EVENT_MS, _event_ms(frame, spec.event_time_column))
    return frame


_SPARK_FORMATS = {"jsonl": "json", "parquet": "parquet"}


def _read_csv(spark: SparkSession, path: str, options: dict[str, str]) -> DataFrame:
    """CSV with a corrupt-record column, which Spark fills only when the schema holds it
    (unlike JSON's): the header's columns are read first, then the rows against them.

    CSV has no null: an empty cell, quoted (``""``) or not, is the empty string, as
    Python's ``csv`` module reads it (Spark would make both null). With a ``nullValue``
    option the user asks for Spark's rule instead, and gets it.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    header = spark.read.options(**options).csv(path).schema
    fields = [f for f in header.fields if f.name != CORRUPT_RECORD]
    schema = T.StructType([*fields, T.StructField(CORRUPT_RECORD, T.StringType())])
    frame = spark.read.options(**options).schema(schema).csv(path)
    if any(name.lower() == "nullvalue" for name in options):
        return frame
    parsed = F.col(CORRUPT_RECORD).isNull()
    cells = [F.col(f.name) for f in fields]  # a malformed row's cells stay as read
    text = [F.when(parsed, F.coalesce(cell, F.lit(""))).otherwise(cell) for cell in cells]
    return frame.select(
        *[t.alias(f.name) for t, f in zip(text, fields, strict=True)], F.col(CORRUPT_RECORD)
    )


def check_columns(columns: list[str], spec: JobSpec) -> None:
    """Every column the spec names is one the input has; the error names the option."""
    present = [c for c in columns if c != CORRUPT_RECORD]
    wanted: list[tuple[str, list[str]]] = [
        ("--key-column", list(spec.key_columns)),
        ("--event-time-column", [spec.event_time_column] if spec.event_time_column else []),
    ]
    if spec.enricher is None:
        config = spec.http_config()
        if config.url_template is not None:
            wanted.append(("--url-template", config.compile_url().fields))
        if config.body_template is not None:
            wanted.append(("http.body_template", config.compile_body().fields))
    for option, names in wanted:
        missing = sorted({name for name in names if name not in present})
        if missing:
            fields = ", ".join(repr(m) for m in missing)
            raise SpecError(
                f"{option}: {fields} not an input column; the input's columns: "
                f"{', '.join(present) or 'none'}"
            )


def _event_ms(frame: DataFrame, column: str) -> Column:
    """Milliseconds since the epoch (integers are taken as such); null when the value is
    not a timestamp."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    data_type = frame.schema[column].dataType
    if isinstance(data_type, T.IntegralType):
        return F.col(column).cast("long")
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType | T.DateType):
        return F.unix_millis(F.col(column).cast("timestamp"))
    text = F.col(column).cast("string")
    return F.when(text.rlike(r"^-?[0-9]+$"), text.cast("long")).otherwise(
        F.unix_millis(F.try_to_timestamp(text))
    )
