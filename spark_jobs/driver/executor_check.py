"""Before any data moves: can the executors' Python import what the job needs?

Without this, a cluster whose workers lack the job's packages fails deep inside a Python
worker (a ``ModuleNotFoundError`` in a task's stack trace, after Spark's retries). One
tiny DataFrame job, a plain Python UDF that needs nothing but Spark's own Python, asks
the executors instead, and the error names what is missing, where, and how to ship it.
A DataFrame, not an RDD: it runs over Spark Connect too, where there is no
``SparkContext``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from spark_jobs.driver.connect import is_connect
from spark_jobs.driver.task_slots import spark_conf, task_slots
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.secret_check import secret_variable_names

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Import names the partition runner needs on an executor.
REQUIRED_MODULES = ("pyarrow", "aiohttp", "uvloop", "fsspec", "yaml", "spark_jobs")
#: Probe tasks when the conf does not tell the cluster's task slots.
PROBE_TASKS = 2

_SHIP_ENV = (
    "ship the job's environment with --ship-env dist/enrich_env.pex (built by `make dist`), "
    "or install resumable-enrichment on every worker"
)
_CONNECT = (
    "the job ships its own code (spark_jobs) over Spark Connect; install the other packages "
    "on the Spark Connect server's Python"
)


class ExecutorEnvironmentError(RuntimeError):
    """The executors' Python cannot run the job."""


def check_executors(spark: SparkSession, spec: JobSpec) -> None:
    """Raise :class:`ExecutorEnvironmentError` naming the modules (and, over Spark
    Connect, the environment variables of ``spec``'s secrets) the executors lack.

    Skipped in classic ``local`` mode, where the workers run the driver's own interpreter
    in its environment. Over Connect it always runs: the server's workers are never this
    process's, and their environment is the server's."""
    conf = spark_conf(spark)
    connect = is_connect(spark)
    if not connect and (conf("spark.master") or "local").startswith("local"):
        return
    variables = tuple(secret_variable_names(spec)) if connect else ()
    answers = _probe(spark, (task_slots(conf) or (PROBE_TASKS, ""))[0], variables)
    missing = sorted({name for _, _, names, _ in answers for name in names})
    unset = sorted({name for _, _, _, names in answers for name in names})
    if missing:
        where = sorted({f"{python} on {host}" for host, python, names, _ in answers if names})
        raise ExecutorEnvironmentError(
            f"the executors' Python lacks {', '.join(missing)} ({'; '.join(where)}): "
            f"{_CONNECT if connect else _SHIP_ENV}"
        )
    if unset:
        raise ExecutorEnvironmentError(
            f"the executors lack the environment variable(s) {', '.join(unset)} that the "
            "enricher reads its secrets from: over Spark Connect they run in the server's "
            "environment, not this client's; set them on the server (spark.executorEnv.*) or "
            "give the token as a file the executors can read (http: {token_file: ...})"
        )


def _probe(spark: SparkSession, tasks: int, variables: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """``(host, python, missing modules, unset variables)`` from up to ``tasks`` tasks."""
    from pyspark.sql import functions as F

    modules = REQUIRED_MODULES

    def probe(_: Any) -> str:
        # Pickled by value and free of imports at unpickling: it must run where the
        # job's packages are missing.
        import importlib.util
        import json
        import os
        import socket
        import sys

        missing = [name for name in modules if importlib.util.find_spec(name) is None]
        unset = [name for name in variables if not os.environ.get(name, "").strip()]
        return json.dumps([socket.gethostname(), sys.executable, missing, unset])

    # No Arrow: the probe must run where pyarrow is missing.
    answer = F.udf(probe, "string", useArrow=False)(F.col("id")).alias("answer")
    frame = spark.range(0, tasks, 1, tasks).select(answer).distinct()
    return [tuple(json.loads(row["answer"])) for row in frame.collect()]
