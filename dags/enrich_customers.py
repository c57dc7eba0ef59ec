"""Daily enrichment of the customer events of one day, through the customer API.

wait for the day's input -> enrich (resumable Spark job) -> publish

Configuration only: the work is in ``enrichment_airflow`` and ``spark_jobs``. Endpoints and the API
token come from connections (``AIRFLOW_CONN_ENRICHMENT_API``, ``AIRFLOW_CONN_SPARK_ENRICH``),
paths from Variables (``enrichment_data_root``, ``enrichment_snapshot_root``, and
optionally ``enrichment_cache_root``, ``enrichment_cache_ttl``,
``enrichment_cost_per_request`` for the response cache and the cost report, and
``enrichment_ship_environment`` for clusters whose executors need the packed runtime). A retry, a
backfill or a "Clear" of the same day resumes from that day's snapshots.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, Param, Variable, task

from enrichment_airflow.enrichment_operator import ResumableEnrichmentOperator
from spark_jobs import defaults
from spark_jobs.records.summary import JobSummary

DATA_ROOT = "{{ var.value.enrichment_data_root }}"
ENRICHED = Asset("enrichment://customers/enriched")
# This DAG's choice, below the job's default (defaults.PARTITIONS): a day of customer
# events is small. Fixed once runs exist: a resumed run needs the same partition count.
PARTITIONS = 4

with DAG(
    dag_id="enrich_customers",
    description="Enrich the day's customer events through the customer API, resumably",
    schedule="@daily",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=2,
    tags=["enrichment"],
    params={
        "resume": Param(
            defaults.RESUME,
            enum=list(defaults.RESUME_MODES),
            description="auto: resume from snapshots when valid; never: start fresh",
        ),
        # Maximums: a trigger form is input too; 10**9 partitions would stall Spark and
        # the snapshot page, 10**6 connections per task the API.
        "capacity": Param(
            defaults.CAPACITY,
            type="integer",
            minimum=1,
            maximum=10_000,
            description="requests in flight per partition",
        ),
        "partitions": Param(
            PARTITIONS,
            type="integer",
            minimum=1,
            maximum=4_096,
            description="fixed partition count",
        ),
        "snapshot_interval": Param(
            defaults.SNAPSHOT_INTERVAL_S,
            type="number",
            exclusiveMinimum=0,
            maximum=3_600,
            description="seconds between snapshots",
        ),
        "max_requests": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            description="request budget of one try (empty: none); a spent budget fails the "
            "task without retries, and clearing it resumes",
        ),
        "max_dead_letters": Param(
            None,
            type=["null", "string"],
            pattern=r"^\d+(\.\d+)?%$|^\d+$",
            description="N or P%: more dead letters fail the task without retries, "
            "publishing nothing (empty: no limit)",
        ),
        "output_format": Param(
            defaults.OUTPUT_FORMAT,
            enum=list(defaults.OUTPUT_FORMATS),
            description="parquet: the day's folder under output/; delta, iceberg: one "
            "table for every day (tables/customers, partitioned by the day), one commit "
            "per run",
        ),
        "write_mode": Param(
            defaults.WRITE_MODE,
            enum=list(defaults.WRITE_MODES),
            description="a table's: append; replace-interval (a re-run replaces its day); "
            "merge (by id: the enriched columns updated)",
        ),
        "retry_dead_letters": Param(
            None,
            type=["null", "string"],
            pattern=r"^(all|[A-Za-z_]\w*(,[A-Za-z_]\w*)*)$",
            description="all, or error classes (ThrottledError,ServerError): enrich again "
            "only those dead letters of the day's last result and publish the merged result "
            "(empty: a normal run)",
        ),
    },
    default_args={
        "retries": 3,
        "retry_delay": timedelta(seconds=20),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=10),
    },
) as dag:

    @task.sensor(poke_interval=30, timeout=6 * 3600, mode="reschedule")
    def wait_for_input(ds: str | None = None) -> bool:
        """The day's input directory exists and holds data."""
        import fsspec

        fs, root = fsspec.core.url_to_fs(f"{Variable.get('enrichment_data_root')}/input/{ds}")
        return fs.exists(root) and bool(fs.ls(root))

    enrich = ResumableEnrichmentOperator(
        task_id="enrich",
        input_path=DATA_ROOT + "/input/{{ ds }}",
        # Parquet: a folder per day; a table: one for every day, partitioned by it.
        output_path=DATA_ROOT
        + "/{% if params.output_format == 'parquet' %}output/{{ ds }}"
        + "{% else %}tables/customers{% endif %}",
        output_format="{{ params.output_format }}",
        write_mode="{{ params.write_mode }}",
        key_column="id",
        event_time_column="event_time",
        url_path="/customers/{id}",
        response_fields={
            "name": "$.name",
            "segment": "$.segment",
            "score": "$.score:float",
            "city": "$.address.city",
        },
        resume="{{ params.resume }}",
        capacity="{{ params.capacity }}",
        partitions="{{ params.partitions }}",
        ship_environment=f"{{{{ var.value.get('{defaults.SHIP_ENVIRONMENT_VARIABLE}', '') }}}}",
        cache_dir="{{ var.value.get('enrichment_cache_root', '') }}",
        # Unset renders "": the job's own default TTL applies.
        cache_ttl="{{ var.value.get('enrichment_cache_ttl', '') }}",
        max_requests="{{ params.max_requests }}",
        max_dead_letters="{{ params.max_dead_letters }}",
        retry_dead_letters="{{ params.retry_dead_letters }}",
        cost_per_request="{{ var.value.get('enrichment_cost_per_request', '') }}",
        job_args=["--snapshot-interval", "{{ params.snapshot_interval }}"],
        pool="enrichment_api",
        outlets=[ENRICHED],
    )

    @task
    def publish(summary: dict[str, Any], ds: str | None = None) -> dict[str, Any]:
        """Check the day's invariant before downstream consumers (watching the Asset) read it."""
        counts = JobSummary.from_json(summary)  # the XCom is the summary's stored form
        if counts.records_in != counts.records_done:
            raise ValueError(f"{ds}: records lost or doubled: {json.dumps(summary)}")
        print(f"published {ds}: {json.dumps(summary, sort_keys=True)}")
        return summary

    wait_for_input() >> enrich
    publish(enrich.output)  # type: ignore[arg-type]  # TaskFlow resolves the XComArg
