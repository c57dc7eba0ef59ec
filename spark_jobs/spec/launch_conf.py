"""The Spark configuration this process was launched with, read before a session exists.

Under ``spark-submit`` the configuration (``--master``, ``--conf``, ``--files``) lives in
the already running JVM, but ``SparkConf()`` only reads it once PySpark has connected to
that JVM; before, it is silently empty, and a check such as "was a master given?" says
no. Run as ``python -m`` there is no JVM yet and none is started here: the
configuration is empty until the session's own launch.
"""

from __future__ import annotations

import os
from typing import Any


def under_spark_submit() -> bool:
    """spark-submit started this Python process (and its JVM waits for it)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def launch_conf() -> Any:
    """A ``SparkConf`` holding what spark-submit was given (empty under ``python -m``)."""
    from pyspark import SparkConf, SparkContext

    if under_spark_submit():
        SparkContext._ensure_initialized()  # connects to spark-submit's JVM; no context
    return SparkConf()
