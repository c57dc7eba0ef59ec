"""How many partitions run at once: the share of ``--requests-per-second`` each one gets.

Only running tasks send requests, so the rate is divided by the cluster's task slots,
never by the partition count: with 10 000 partitions on 2 000 slots, a per-partition
share would leave 80 % of the rate unused. The slots are read from the Spark conf (no
``SparkContext``: the job may run over Spark Connect), in this order:

* ``--max-concurrent-partitions``, when given;
* ``local[N]`` / ``local[*]`` / ``local-cluster[N,C,M]`` masters;
* ``spark.dynamicAllocation.maxExecutors`` (when dynamic allocation is on) or
  ``spark.executor.instances``, times ``spark.executor.cores`` (YARN and Kubernetes
  default to 1 core), over ``spark.task.cpus``;
* ``spark.cores.max`` over ``spark.task.cpus`` (standalone);
* ``spark.default.parallelism`` (usually at least the cores, so at most the rate);
* otherwise the partition count: the old split, which can never exceed the rate.

Too many slots only leaves rate unused; too few would overshoot it, so every guess
errs high. Never more than the partition count.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Callable

from spark_jobs.spec.job_spec import JobSpec

logger = logging.getLogger(__name__)

ConfGet = Callable[[str], str | None]

_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]")
_ONE_CORE_EXECUTORS = ("yarn", "k8s://")


def task_slots(conf: ConfGet) -> tuple[int, str] | None:
    """The tasks the cluster runs at once and the setting that says so; None if unknown."""
    cpus = _positive(conf, "spark.task.cpus") or 1
    master = (conf("spark.master") or "").strip()
    if local := _LOCAL.fullmatch(master):
        threads = local.group(1)
        threads_n = (os.cpu_count() or 1) if threads == "*" else int(threads or 1)
        return max(1, threads_n // cpus), f"spark.master {master}"
    if cluster := _LOCAL_CLUSTER.fullmatch(master):
        workers, cores_each = int(cluster.group(1)), int(cluster.group(2))
        return max(1, workers * cores_each // cpus), f"spark.master {master}"
    dynamic = (conf("spark.dynamicAllocation.enabled") or "").lower() == "true"
    executors_key = (
        "spark.dynamicAllocation.maxExecutors" if dynamic else "spark.executor.instances"
    )
    executors = _positive(conf, executors_key)
    cores = _positive(conf, "spark.executor.cores")
    if cores is None and master.startswith(_ONE_CORE_EXECUTORS):
        cores = 1
    if executors is not None and cores is not None:
        return max(1, executors * cores // cpus), f"{executors_key} x spark.executor.cores"
    if (total := _positive(conf, "spark.cores.max")) is not None:
        return max(1, total // cpus), "spark.cores.max"
    if (parallelism := _positive(conf, "spark.default.parallelism")) is not None:
        return parallelism, "spark.default.parallelism"
    return None


def with_running_partitions(spec: JobSpec, conf: ConfGet) -> JobSpec:
    """``spec`` with ``max_concurrent_partitions`` set from the cluster when not given,
    saying where the figure came from."""
    if spec.max_concurrent_partitions is None:
        found = task_slots(conf)
        if found is None:
            logger.warning(
                "cannot tell the cluster's task slots from the Spark conf: the request rate "
                "is split across all %d partitions; set --max-concurrent-partitions to use all "
                "of it",
                spec.partitions,
            )
            return spec
        slots, source = found
        spec = dataclasses.replace(spec, max_concurrent_partitions=slots)
    else:
        source = "--max-concurrent-partitions"
    logger.info(
        "%d of %d partitions run at once (%s): they share the request rate",
        spec.running_partitions,
        spec.partitions,
        source,
    )
    return spec


def spark_conf(spark: object) -> ConfGet:
    """A reader of the session's conf (works over Spark Connect too); None for a key
    that is unset or that the session will not tell."""

    def get(key: str) -> str | None:
        try:
            value = spark.conf.get(key, None)  # type: ignore[attr-defined]
        except Exception:  # any refusal means "unknown", the safe answer
            return None
        return None if value is None else str(value)

    return get


def _positive(conf: ConfGet, key: str) -> int | None:
    """A positive whole number set at ``key``; None for unset, ``infinity`` or junk."""
    value = conf(key)
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number > 0 else None
