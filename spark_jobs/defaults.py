"""The job's choices and the defaults that more than one place states, written down once.

The command line (``job_cli``), the spec (``JobSpec``), the HTTP enricher's config, the
Airflow operator and the DAG's params read them here, so a default cannot drift between
a ``--help`` text, a field and a trigger form. Standard library only: the DAG file
imports it at every parse, where Spark and aiohttp must not load.
"""

from __future__ import annotations

from typing import Literal, get_args
from urllib.parse import quote

ResumeMode = Literal["auto", "never", "require"]
"""``auto`` resumes when a valid snapshot exists, ``never`` starts fresh, ``require``
fails unless there is one to resume from."""
Mode = Literal["ordered", "unordered"]
"""The async wait operator's output order: input order, or completion order."""
InputFormat = Literal["jsonl", "parquet", "csv"]
SparkLogLevel = Literal["ERROR", "WARN", "INFO", "DEBUG"]
"""Level of Spark's own (log4j2) logging; the job's own lines are always shown."""
RedirectPolicy = Literal["none", "same-origin"]
"""Which HTTP redirects the enricher follows: none (a 3xx is a dead letter), or those to
the same scheme, host and port (each a call of its own: rate limit, budget)."""

OutputFormat = Literal["parquet", "delta", "iceberg"]
"""What ``--output`` is: a folder of Parquet named by its ``_SUMMARY.json``, or a table
(``driver/table_publish.py``) any engine reading the format sees whole or not at all."""
WriteMode = Literal["append", "replace-interval", "merge"]
"""How a run's rows join a table: added; replacing the rows of the run's data interval
(a backfill or a Clear re-runs a day without duplicating it); merged by key (the enriched
columns of keys already there updated, new keys added)."""
DeadLetterLayout = Literal["table", "inline"]
"""Where a table output keeps the records that failed: a table of their own beside the
data table, or in it with typed ``_status``, ``_error`` and ``_attempts`` columns."""

RESUME_MODES: tuple[ResumeMode, ...] = get_args(ResumeMode)
MODES: tuple[Mode, ...] = get_args(Mode)
INPUT_FORMATS: tuple[InputFormat, ...] = get_args(InputFormat)
SPARK_LOG_LEVELS: tuple[SparkLogLevel, ...] = get_args(SparkLogLevel)
REDIRECT_POLICIES: tuple[RedirectPolicy, ...] = get_args(RedirectPolicy)
OUTPUT_FORMATS: tuple[OutputFormat, ...] = get_args(OutputFormat)
WRITE_MODES: tuple[WriteMode, ...] = get_args(WriteMode)
DEAD_LETTER_LAYOUTS: tuple[DeadLetterLayout, ...] = get_args(DeadLetterLayout)

RESUME: ResumeMode = "auto"
MODE: Mode = "unordered"
INPUT_FORMAT: InputFormat = "jsonl"
OUTPUT_FORMAT: OutputFormat = "parquet"
WRITE_MODE: WriteMode = "append"
DEAD_LETTER_LAYOUT: DeadLetterLayout = "table"
INTERVAL_COLUMN = "interval_start"
"""The column of a table output naming each row's data interval (``--interval-start``),
its partition column: what ``replace-interval`` replaces."""
DEAD_LETTER_TABLE_SUFFIX = "_dead_letters"
"""The dead-letter table of a table output is its location with this suffix, beside it."""
PARTITIONS = 8
"""Fixed: a resumed partition must see the same rows in the same order."""
CAPACITY = 100
"""Requests in flight per partition (also the connection pool's per-host limit)."""
THROTTLE_WINDOW = 100
"""How many recent answers of a partition decide whether its throttling is sustained."""
THROTTLE_SHARE = 0.1
"""Share of 429s among those answers that means a rate limit (cut the rate, pause every
send). 10 of 100: random 429s of 2 % of calls reach it with a
probability of 3e-5 per window (binomial), a rate above a limit at once."""
SNAPSHOT_INTERVAL_S = 10.0
OTEL_INTERVAL_S = 10.0
"""Seconds between two exports of a worker's metrics (and one more at partition end)."""
CACHE_TTL = "1d"
CACHE_KEY_ENV = "ENRICHMENT_CACHE_KEY"
"""The environment variable holding the key that signs the response cache's entries
(``spark_jobs/partition_runner/cache_scope.py``); without it the key is derived from the
API's secrets."""
MAX_RESPONSE_BYTES = 10 * 2**20
FOLLOW_REDIRECTS: RedirectPolicy = "none"
"""aiohttp follows redirects to any host and keeps custom secret headers (``X-Api-Key``)
on the way, even from https to http: none are followed unless asked for."""
DEAD_LETTER_RETRY_SUFFIX = ".dead-letters"
"""A ``--retry-dead-letters`` run's snapshot namespace is its task id with this suffix."""
SPARK_LOG_LEVEL: SparkLogLevel = "WARN"
"""Spark's INFO lines (hundreds a run) would bury the job's decision, progress and summary."""

SNAPSHOT_ROOT_VARIABLE = "enrichment_snapshot_root"
"""The Airflow Variable naming the snapshot root, for the operators and the web view."""
ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` a model of ``api: anthropic`` sends (``model.anthropic_version``)."""
SHIP_ENVIRONMENT_VARIABLE = "enrichment_ship_environment"
"""The Airflow Variable the example DAG reads the packed runtime's path from."""


def summary_location(
    output: str, output_format: str, interval_start: str, interval_column: str = INTERVAL_COLUMN
) -> str:
    """Where a run's ``_SUMMARY.json`` is: the output's folder, or for a table output the
    folder of the run's interval partition (each interval's publish its own, however many
    publish into the table at once; hidden from table readers by its ``_``)."""
    if output_format == "parquet":
        return output.rstrip("/")
    return interval_folder(output, interval_column, interval_start)


def interval_folder(table: str, column: str, value: str) -> str:
    """``<table>/<column>=<value>``, the value percent-encoded as delta-rs encodes a
    partition folder (``2026-12-01T00%3A00%3A00%2B00%3A00``): the layout Delta writers
    use and engines that read partition values from paths (Polars) need."""
    return f"{table.rstrip('/')}/{column}={quote(value, safe='')}"
