"""The OpenLineage parent job the Airflow task hands the Spark job, as its Spark conf.

Airflow's Spark provider injects the parent job information into the submit's conf when
``[openlineage] spark_inject_parent_job_info`` (or the operator's
``openlineage_inject_parent_job_info``) is on: ``spark.openlineage.parentJobNamespace``,
``parentJobName``, ``parentRunId`` and the root job's three. OpenLineage's Spark listener
(a JVM jar, when the cluster has it) reads the same keys. This job reads them on the
driver into the spec's ``lineage_parent``, which links what the job reports to the
Airflow task that ran it: ``_SUMMARY.json`` gains ``lineage_parent``, and the workers'
metrics carry it as resource attributes (``telemetry.LINEAGE_ATTRIBUTES``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from spark_jobs.spec.job_spec import JobSpec

#: The provider's Spark conf keys, by the name the summary gives each.
PARENT_KEYS = {
    "namespace": "spark.openlineage.parentJobNamespace",
    "name": "spark.openlineage.parentJobName",
    "run_id": "spark.openlineage.parentRunId",
    "root_namespace": "spark.openlineage.rootParentJobNamespace",
    "root_name": "spark.openlineage.rootParentJobName",
    "root_run_id": "spark.openlineage.rootParentRunId",
}


def lineage_parent(conf: Callable[[str], str | None]) -> dict[str, str]:
    """The parent job information found in the session's ``conf``; empty without one."""
    found = {name: conf(key) for name, key in PARENT_KEYS.items()}
    return {name: value for name, value in found.items() if value}


def with_lineage_parent(spec: JobSpec, conf: Callable[[str], str | None]) -> JobSpec:
    """``spec`` naming the parent job found in ``conf`` (one a spec file names wins)."""
    parent = lineage_parent(conf)
    if not parent or spec.lineage_parent:
        return spec
    return dataclasses.replace(spec, lineage_parent=parent)
