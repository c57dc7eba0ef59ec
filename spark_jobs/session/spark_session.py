"""The Spark session the job runs in: Java present, the executors' Python (or a Spark
Connect server's, ``connect.py``), the settings that keep partition ids meaning the
same rows in every attempt, and a redaction pattern that hides the variables secrets
come from in the Spark UI and event log."""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spark_jobs.session.class_archive import class_archive, set_aside
from spark_jobs.session.connect import connect_session
from spark_jobs.session.jvm import jit_options, launching
from spark_jobs.session.spark_logging import quiet_builder
from spark_jobs.spec.launch_conf import launch_conf, under_spark_submit
from spark_jobs.spec.spec_error import SpecError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

#: Spark's own ``spark.redaction.regex``: it matches a setting's name or value, so the
#: API token's usual ``ENRICHMENT_API_TOKEN`` is hidden, but not ``CRM_KEY`` nor
#: ``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer …``.
SPARK_REDACTION_REGEX = "(?i)secret|password|token|access[.]?key"
#: The OpenTelemetry exporter's header variables (the job's metrics exporter reads both).
OTLP_HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS")


def check_java() -> None:
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise SpecError(
            "Java not found: Spark needs Java 17 (install openjdk-17-jre-headless or set JAVA_HOME)"
        )


def spark_session(
    ship_env: str | None, remote: str | None = None, secret_variables: Sequence[str] = ()
) -> SparkSession:
    """The job's session: a Spark Connect client of ``remote`` (``sc://...``), else a
    classic one (spark-submit's, or ``local[*]`` under ``python -m``, its driver JVM
    mapping the class archive when there is one, ``class_archive.py``, with the JIT
    options of ``jvm.py``, hiding ``secret_variables`` and the OTLP headers in
    its UI, :func:`redaction_regex`)."""
    spark = connect_session(remote) if remote else _classic_session(ship_env, secret_variables)
    # Partition ids must mean the same rows in every attempt: no adaptive coalescing.
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.shuffle.partitions", "8")  # only the small per-partition count
    return spark


def redaction_regex(submitted: str | None, secret_variables: Sequence[str]) -> str:
    """``spark.redaction.regex``: the launch's (else Spark's default) and the names of the
    variables the executors read secrets from, so ``spark.executorEnv.<name>`` shows as
    ``*********(redacted)`` in the Spark UI, its REST API and the event log. (The
    command line that set it is another matter: see docs/telemetry.md.)"""
    names = [*OTLP_HEADER_VARIABLES, *secret_variables]
    return "|".join([submitted or SPARK_REDACTION_REGEX, *map(re.escape, names)])


def _classic_session(ship_env: str | None, secret_variables: Sequence[str]) -> SparkSession:
    from pyspark import SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    submitted = launch_conf()  # spark-submit's --master, --files, --conf
    builder = quiet_builder(SparkSession.builder.appName("enrich_job"), submitted)
    regex = redaction_regex(submitted.get("spark.redaction.regex", None), secret_variables)
    builder = builder.config("spark.redaction.regex", regex)
    if ship_env:
        # The PEX travels with the job (into every executor's working directory) and is
        # the executors' Python: it holds the job's packages, Spark adds its own.
        pex = os.path.abspath(ship_env)
        shipped = ",".join(filter(None, [submitted.get("spark.files", ""), pex]))
        builder = builder.config("spark.files", shipped)
        os.environ["PYSPARK_PYTHON"] = f"./{os.path.basename(ship_env)}"
    else:
        # Without this Spark's Python workers start `python3` from PATH and miss every package.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if not submitted.contains("spark.master"):  # python -m, not spark-submit
        builder = builder.master(os.environ.get("SPARK_MASTER", "local[*]"))
    # A JVM already running (spark-submit's, an earlier session's here) took its options.
    launched_here = not (under_spark_submit() or SparkContext._gateway)
    archive = class_archive() if launched_here else None
    jit = jit_options() if launched_here else ""
    try:
        with launching(f"{archive.java_options} {jit}" if archive else jit):
            return builder.getOrCreate()
    except PySparkRuntimeError as error:
        if archive is None or error.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
    with launching(jit):  # raises again unless the archive's options were at fault
        spark = builder.getOrCreate()
    set_aside(archive)
    return spark


def cancel_running(spark: SparkSession) -> None:
    """Stop every running Spark operation of the job's session, from any thread (the
    lease's heartbeat, when a successor took the namespace over).

    The session's interrupt API, which Spark Connect has and classic Spark 4 too, not
    ``SparkContext.cancelAllJobs`` (no ``SparkContext`` over Connect). The session is the
    job's own, so all of its operations are this run's. A job tag would narrow it further,
    but classic Spark 4.2 finds a tag only in the thread that added it (``interruptTag``
    from the heartbeat's thread interrupts nothing), so the tag would work over Connect
    alone."""
    stopped = spark.interruptAll()
    logger.warning("cancelled %d running Spark operation(s) of this run", len(stopped))
