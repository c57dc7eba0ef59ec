"""Before any data moves: can the executors' Python import what the job needs?

Without this, a cluster whose workers lack the job's packages fails deep inside a Python
worker (a ``ModuleNotFoundError`` in a task's stack trace, after Spark's retries). One
tiny DataFrame job, a plain Python UDF that needs nothing but Spark's own Python, asks
the executors instead, and the error names what is missing, where, and how to ship it.
A DataFrame, not an RDD: it runs over Spark Connect too, where there is no
``SparkContext``.

On a classic session the check runs beside the driver's first steps (the lease, reading
the input, sizing its partitions) and is waited for before anything is written or any
call made (:class:`ExecutorCheck`). Its tasks also import the runner's modules, so the
Python workers Spark keeps for reuse (``spark.python.worker.reuse``, on by default) are
warm when the partitions' tasks start: a cold worker's start and imports took 3 to 4 s of
the first task on 2 cores, now spent while the driver reads.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from spark_jobs.session.connect import is_connect
from spark_jobs.session.task_slots import spark_conf, task_slots
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.secret_check import secret_variable_names

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Import names the partition runner needs on an executor.
REQUIRED_MODULES = ("pyarrow", "aiohttp", "uvloop", "fsspec", "yaml", "spark_jobs")
#: What a partition's task imports first: imported by the probe once the modules are
#: found, so the worker that runs the task has them already.
RUNNER_MODULES = ("spark_jobs.spec.job_spec", "spark_jobs.snapshots", "spark_jobs.partition_runner")
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


class ExecutorCheck:
    """:func:`check_executors` started now; :meth:`wait` waits for it and raises its error.

    On a classic session it runs in a thread of its own, beside what the driver does next
    (Spark runs jobs from several threads at once). Over Spark Connect it runs at once,
    alone, as before: its warm-up would be the server's workers', none of this run's time.
    """

    def __init__(self, spark: SparkSession, spec: JobSpec) -> None:
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if is_connect(spark):
            self._check(spark, spec)
            return
        self._thread = threading.Thread(
            target=self._check, args=(spark, spec), name="executor-check", daemon=True
        )
        self._thread.start()

    def _check(self, spark: SparkSession, spec: JobSpec) -> None:
        try:
            check_executors(spark, spec)
        except BaseException as error:  # raised in the driver's thread, by wait()
            self._error = error

    def wait(self) -> None:
        """Return once the executors are known to be able to run the job, else raise."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error


def check_executors(spark: SparkSession, spec: JobSpec) -> None:
    """Raise :class:`ExecutorEnvironmentError` naming the modules (and, over Spark
    Connect, the environment variables of ``spec``'s secrets) the executors lack.

    In classic ``local`` mode too, where the workers run the driver's interpreter unless
    ``PYSPARK_PYTHON`` says otherwise: there it is mostly the workers' warm-up. One probe
    task per task slot, never more than the job's partitions (no more run at once)."""
    conf = spark_conf(spark)
    connect = is_connect(spark)
    variables = tuple(secret_variable_names(spec)) if connect else ()
    slots = (task_slots(conf) or (PROBE_TASKS, ""))[0]
    # No warm-up over Connect: the server's workers may hold an older spark_jobs than the
    # one the job ships, and a module imported once stays for the worker's next tasks.
    warm = () if connect else RUNNER_MODULES
    answers = _probe(spark, max(1, min(slots, spec.partitions)), variables, warm)
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


def _probe(
    spark: SparkSession, tasks: int, variables: tuple[str, ...], warm: tuple[str, ...]
) -> list[tuple[Any, ...]]:
    """``(host, python, missing modules, unset variables)`` from up to ``tasks`` tasks,
    each importing the ``warm`` modules once every required one is found."""
    from pyspark.sql import functions as F

    modules = REQUIRED_MODULES

    def probe(_: Any) -> str:
        # Pickled by value and free of imports at unpickling: it must run where the
        # job's packages are missing.
        import importlib
        import importlib.util
        import json
        import os
        import socket
        import sys

        missing = [name for name in modules if importlib.util.find_spec(name) is None]
        unset = [name for name in variables if not os.environ.get(name, "").strip()]
        for name in warm if not missing else ():
            try:
                importlib.import_module(name)
            except Exception:  # the warm-up only: the task that needs it raises the error
                break
        return json.dumps([socket.gethostname(), sys.executable, missing, unset])

    # No Arrow: the probe must run where pyarrow is missing. One answer per task, alike
    # ones merged here: a distinct() would add a shuffle whose tasks hold the slots
    # the partitions' count waits for.
    answer = F.udf(probe, "string", useArrow=False)(F.col("id")).alias("answer")
    frame = spark.range(0, tasks, 1, tasks).select(answer)
    return [tuple(json.loads(text)) for text in sorted({row["answer"] for row in frame.collect()})]
