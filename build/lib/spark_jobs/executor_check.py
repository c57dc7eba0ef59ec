"""Before any data moves: can the executors' Python import what the job needs?

Without this, a cluster whose workers lack the job's packages fails deep inside a Python
worker (a ``ModuleNotFoundError`` in a task's stack trace, after Spark's retries). One
tiny RDD job, which needs nothing but Spark's own Python, asks every executor instead,
and the error names what is missing, where, and how to ship it.
"""

from __future__ import annotations

from typing import Any

#: Import names the partition runner needs on an executor.
REQUIRED_MODULES = ("pyarrow", "aiohttp", "uvloop", "fsspec", "yaml", "spark_jobs")


class ExecutorEnvironmentError(RuntimeError):
    """The executors' Python cannot run the job."""


def check_executors(spark: Any) -> None:
    """Raise :class:`ExecutorEnvironmentError` naming the modules the executors lack.

    Skipped in ``local`` mode, where the workers run the driver's own interpreter.
    """
    context = spark.sparkContext
    if context.master.startswith("local"):
        return
    modules = REQUIRED_MODULES

    def probe(_: Any) -> list[tuple[str, str, list[str]]]:
        # Pickled by value and free of imports at unpickling: it must run where the
        # job's packages are missing.
        import importlib.util
        import socket
        import sys

        missing = [name for name in modules if importlib.util.find_spec(name) is None]
        return [(socket.gethostname(), sys.executable, missing)]

    slots = max(context.defaultParallelism, 1)
    answers = context.parallelize(range(slots), slots).mapPartitions(probe).collect()
    missing = sorted({name for _, _, names in answers for name in names})
    if missing:
        where = sorted({f"{python} on {host}" for host, python, names in answers if names})
        raise ExecutorEnvironmentError(
            f"the executors' Python lacks {', '.join(missing)} ({'; '.join(where)}): ship the "
            "job's environment with --ship-env dist/enrich_env.pex (built by `make dist`), "
            "or install resumable-enrichment on every worker"
        )
