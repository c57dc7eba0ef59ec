"""Spark's own logging for the job: the shipped ``log4j2.properties`` at WARN by default.

Spark logs hundreds of INFO lines a run; in a task log they bury the ten that matter (resume
decision, progress, summary). The configuration must reach the driver JVM before it starts,
so it travels as Java options (``launch.java_options``): ``python -m
spark_jobs.enrich_job`` puts them in ``PYSPARK_SUBMIT_ARGS`` (read when PySpark launches its
JVM); the Airflow operator passes them in ``spark.driver.extraJavaOptions``. Under a plain
``spark-submit`` the JVM is already running with Spark's defaults, so the job sets the level
once the session exists (lines before that stay Spark's). PySpark's own launch runs Spark as
a shell, whose console shows WARN and above whatever the level: ``python -m`` can quiet
Spark, not raise it; raise it under ``spark-submit``.
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

from spark_jobs.launch import java_options

if TYPE_CHECKING:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession


def configure_launch(level: str) -> None:
    """Before PySpark starts its own JVM (``python -m``): have it use the shipped file.

    A user's own ``PYSPARK_SUBMIT_ARGS`` choosing a log4j2 file is left alone.
    """
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # spark-submit: the JVM already runs
        return
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    if "log4j2.configurationFile" in submit_args:
        return
    options = shlex.quote(java_options(level))
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-java-options {options} {submit_args}"


def quiet_builder(builder: SparkSession.Builder, conf: SparkConf) -> SparkSession.Builder:
    """No console progress bar unless asked for (``conf``: the launch's SparkConf): in a
    task log it is a line of ``\r`` redraws that swallows the job's own lines."""
    if conf.contains("spark.ui.showConsoleProgress"):
        return builder
    return builder.config("spark.ui.showConsoleProgress", "false")


def apply_level(spark: SparkSession, level: str) -> None:
    """Spark's level on a running classic session (covers a plain ``spark-submit``).

    A Spark Connect server's logging is the server's own: a client has no say in it."""
    from spark_jobs.session.connect import is_connect

    if not is_connect(spark):
        spark.sparkContext.setLogLevel(level)
