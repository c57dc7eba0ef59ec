"""How the job is launched, as the driver and the Airflow operator both need it: the entry
point, the Spark Connect URL's variable and its redaction, the driver's logging options.

Standard library only, beside ``defaults``: the plugin imports it in Airflow's processes,
where Spark and aiohttp must not load (``tests/unit/test_layers.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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


LOG4J2_FILE = Path(__file__).parent / "session" / "log4j2.properties"
"""Spark's logging for the job (``session/spark_logging.py``): the driver JVM reads it from
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
