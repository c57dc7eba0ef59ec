"""The run's counts and cost through Airflow's own metrics API.

``Stats`` (``airflow.sdk.observability.stats``, the task SDK's home of it in Airflow 3.3)
sends to whatever the deployment's ``[metrics]`` section configures: StatsD, DogStatsD or
OpenTelemetry (``otel_on``), under its prefix (``airflow.`` by default). So a platform
team sees the enrichment beside Airflow's own task metrics, with no collector of ours.
Tags name the DAG and task; StatsD without tag support folds them away, OTel keeps them
as attributes.
"""

from __future__ import annotations

from airflow.sdk.observability.stats import Stats

from spark_jobs.records.summary import JobSummary

#: Summary counts sent as counters (``enrichment.<key>``), added up across runs.
COUNTS = ("records_in", "enriched", "dead_letters", "requests_made", "replayed_from_snapshot")


def emit_task_metrics(summary: JobSummary, dag_id: str, task_id: str) -> None:
    """Counters for the summary's counts; the run's estimated cost as a gauge
    (``enrichment.estimated_cost``) and, spent money adding up, as a counter of
    micro-units (``enrichment.estimated_cost_micros``), when ``cost_per_request`` is set."""
    tags = {"dag_id": dag_id, "task_id": task_id}
    for key in COUNTS:
        Stats.incr(f"enrichment.{key}", getattr(summary, key), tags=tags)
    cost = summary.estimated_cost
    if cost is not None:
        Stats.gauge("enrichment.estimated_cost", float(cost), tags=tags)
        Stats.incr("enrichment.estimated_cost_micros", round(cost * 1_000_000), tags=tags)
