"""The job's choices and the defaults that more than one place states, written down once.

The command line (``job_cli``), the spec (``JobSpec``), the HTTP enricher's config, the
Airflow operator and the DAG's params read them here, so a default cannot drift between
a ``--help`` text, a field and a trigger form. Standard library only: the DAG file
imports it at every parse, where Spark and aiohttp must not load.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, get_args

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

RESUME_MODES: tuple[ResumeMode, ...] = get_args(ResumeMode)
MODES: tuple[Mode, ...] = get_args(Mode)
INPUT_FORMATS: tuple[InputFormat, ...] = get_args(InputFormat)
SPARK_LOG_LEVELS: tuple[SparkLogLevel, ...] = get_args(SparkLogLevel)
REDIRECT_POLICIES: tuple[RedirectPolicy, ...] = get_args(RedirectPolicy)

RESUME: ResumeMode = "auto"
MODE: Mode = "unordered"
INPUT_FORMAT: InputFormat = "jsonl"
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
SHIP_ENVIRONMENT_VARIABLE = "enrichment_ship_environment"
"""The Airflow Variable the example DAG reads the packed runtime's path from."""

ENRICH_JOB = str(Path(__file__).with_name("enrich_job.py"))
"""The job's entry point, the application the operator submits."""
REMOTE_ENV = "SPARK_REMOTE"
"""The environment variable PySpark itself reads a Spark Connect URL from: the job reads
it, the operator's Connect run sets it (a URL's token never goes on a command line)."""
_REMOTE_SECRET = re.compile(r"(token)=[^;]*", re.IGNORECASE)


def remote_secret(url: str) -> bool:
    """Whether a Spark Connect ``url`` holds a secret (a ``token`` parameter)."""
    return _REMOTE_SECRET.search(url) is not None


def redacted(url: str) -> str:
    """A Spark Connect ``url`` fit for a log line: a token parameter's value hidden."""
    return _REMOTE_SECRET.sub(r"\1=***", url)


LOG4J2_FILE = Path(__file__).parent / "driver" / "log4j2.properties"
"""Spark's logging for the job (``driver/spark_logging.py``): the driver JVM reads it from
its Java options, which the job (``python -m``) and the operator (spark-submit) set."""
_LEVEL_PROPERTY = "enrich_job.spark_log_level"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def java_options(level: str) -> str:
    """The driver's Java options selecting the shipped configuration at ``level``."""
    return f"-Dlog4j2.configurationFile={LOG4J2_FILE.as_uri()} -D{_LEVEL_PROPERTY}={level}"


def with_java_options(conf: dict[str, Any], level: str) -> dict[str, Any]:
    """Spark ``conf`` (spark-submit's) with the driver JVM using the shipped file, added
    to the driver's own Java options; a user's own log4j2 file is left alone."""
    options = str(conf.get(DRIVER_JAVA_OPTIONS, ""))
    if "log4j2.configurationFile" in options:
        return dict(conf)
    return {**conf, DRIVER_JAVA_OPTIONS: f"{options} {java_options(level)}".strip()}
