"""The resumable enrichment operator: ``SparkSubmitOperator`` plus snapshot awareness.

It wires, as the Spark provider's operators do: ``EnrichmentApiHook`` resolves the API
connection and token and reads what the job leaves behind; the Spark provider's own hook
submits. Before submitting the task log says what the run will do ("resuming epoch 12:
48 213 of 100 000 records committed, 64 in flight"); after the job the summary is the
XCom and its counts and combined watermark go on the Asset events of the outlets. The
token reaches the job as an environment variable, never on the command line.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException

import spark_jobs
from plugins.enrichment_hook import EnrichmentApiHook
from plugins.links import SnapshotProgressLink
from plugins.namespace import namespace_key
from plugins.progress_reporter import reporting_progress
from spark_jobs import defaults
from spark_jobs.defaults import RESUME_MODES
from spark_jobs.snapshots import NamespaceKey

ENRICH_JOB = str(Path(spark_jobs.__file__).parent / "enrich_job.py")
#: Summary counts put on the outlets' Asset events.
ASSET_EVENT_KEYS = (
    "records_in",
    "enriched",
    "dead_letters",
    "requests_made",
    "replayed_from_snapshot",
    "resumed",
    "watermark",
    "cost",
)


class ResumableEnrichmentOperator(SparkSubmitOperator):
    """Enrich ``input_path`` into ``output_path`` through the API of ``api_conn_id``.

    :param input_path: the input: a file, directory or glob, any Spark URL (templated).
    :param output_path: where ``data/``, ``dead_letters/`` and ``_SUMMARY.json`` go
        (templated).
    :param key_column: the record key, one column or several (``"a,b"`` or a list):
        partitioning and order within a partition.
    :param url_path: path template appended to the connection's base URL, e.g.
        ``/customers/{id}`` (``{field}`` placeholders come from each record).
    :param response_fields: ``{"name": "$.json.path[:type]"}`` output fields.
    :param api_conn_id: the API's connection (``EnrichmentApiHook``): host, port, scheme,
        and the bearer token as its password.
    :param spark_conn_id: the Spark connection (the provider's ``conn_id``).
    :param resume: ``auto`` (default: resume when a valid snapshot exists), ``never``
        (start fresh) or ``require`` (fail unless there is one to resume) (templated).
    :param partitions: fixed partition count; a resumed run must use the same one
        (templated).
    :param capacity: requests in flight per partition (templated).
    :param input_format: ``jsonl``, ``parquet`` or ``csv``.
    :param input_options: Spark reader options over the job's own, e.g. ``{"sep": ";"}``;
        options that would drop or alter rows are refused (``--input-option``) (templated).
    :param event_time_column: the event time column; enables watermarks.
    :param snapshot_root: where snapshots live (any fsspec URL); empty for the
        ``enrichment_snapshot_root`` Variable (templated).
    :param ship_environment: the packed runtime from ``make dist`` (``enrich_env.pex``)
        for clusters whose executors lack the job's packages (YARN, Kubernetes, a bare
        standalone cluster): shipped with ``--files`` and run as the executors' Python
        (``spark.pyspark.python``). Empty (default) for ``local[*]`` or prepared workers
        (templated).
    :param cache_dir: response cache across runs (fsspec URL); empty for none (templated).
    :param cache_ttl: how long cached answers are used, e.g. ``7d`` (templated).
    :param max_requests: request budget of one try; a spent budget fails the task without
        automatic retries, and clearing it resumes (templated).
    :param cost_per_request: price of one call, for the summary's cost report (templated).
    :param max_dead_letters: ``N`` or ``P%``: more dead letters fail the task without
        automatic retries, publishing nothing; empty for no limit (templated).
    :param retry_dead_letters: ``all`` or error classes (``ThrottledError,ServerError``):
        this run enriches again only those dead letters of the interval's last result and
        publishes the merged result; empty for a normal run (templated).
    :param job_args: further ``enrich_job`` flags, e.g. ``["--timeout", "10"]`` (templated).
    :param kwargs: ``SparkSubmitOperator``'s parameters (``conf``, ``files``,
        ``env_vars``...), except ``application``, ``conn_id`` and ``application_args``,
        which this operator sets: extra job flags go in ``job_args``.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "input_path",
        "output_path",
        "resume",
        "partitions",
        "capacity",
        "snapshot_root",
        "ship_environment",
        "cache_dir",
        "cache_ttl",
        "max_requests",
        "cost_per_request",
        "input_options",
        "max_dead_letters",
        "retry_dead_letters",
        "job_args",
    )
    operator_extra_links = (SnapshotProgressLink(),)
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        input_path: str,
        output_path: str,
        key_column: str | Sequence[str],
        url_path: str,
        response_fields: dict[str, str],
        api_conn_id: str = EnrichmentApiHook.default_conn_name,
        spark_conn_id: str = "spark_enrich",
        resume: str = defaults.RESUME,
        partitions: int | str = defaults.PARTITIONS,
        capacity: int | str = defaults.CAPACITY,
        input_format: defaults.InputFormat = defaults.INPUT_FORMAT,
        event_time_column: str | None = None,
        snapshot_root: str | None = None,
        ship_environment: str | None = None,
        cache_dir: str | None = None,
        cache_ttl: str | None = None,
        max_requests: int | str | None = None,
        cost_per_request: float | str | None = None,
        input_options: dict[str, str] | None = None,
        max_dead_letters: int | str | None = None,
        retry_dead_letters: str | None = None,
        job_args: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("name", "enrich_job")
        super().__init__(application=ENRICH_JOB, conn_id=spark_conn_id, **kwargs)
        if self.application_args:  # also from default_args: it would be replaced silently
            raise ValueError(
                "application_args: this operator builds the job's arguments from its "
                f"parameters; pass further enrich_job flags as job_args, got "
                f"{self.application_args!r}"
            )
        if not url_path.startswith("/"):
            # "@evil/x/{id}" after the connection's host:port would make "evil" the host.
            raise ValueError(f"url_path must start with '/', got {url_path!r}")
        self.input_path = input_path
        self.output_path = output_path
        self.key_column = key_column if isinstance(key_column, str) else ",".join(key_column)
        self.url_path = url_path
        self.response_fields = dict(response_fields)
        self.api_conn_id = api_conn_id
        self.resume = resume
        self.partitions = partitions
        self.capacity = capacity
        self.input_format = input_format
        self.event_time_column = event_time_column
        self.snapshot_root = snapshot_root
        self.ship_environment = ship_environment
        self.cache_dir = cache_dir
        self.cache_ttl = cache_ttl
        self.max_requests = max_requests
        self.cost_per_request = cost_per_request
        self.input_options = dict(input_options or {})
        self.max_dead_letters = max_dead_letters
        self.retry_dead_letters = retry_dead_letters
        self.job_args = list(job_args)

    # The summary goes to XCom; the provider declares its execute as returning None.
    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        api = EnrichmentApiHook(self.api_conn_id, self.snapshot_root)
        key = namespace_key(context)
        run_id = f"{context['run_id']}.try{context['ti'].try_number}.{uuid.uuid4().hex[:6]}"
        token_env, token_args = api.token_route(self._spark_master())
        self.application_args = self._job_args(api, key, run_id, token_args)
        self.env_vars = {**self._python_env(), **(self.env_vars or {}), **token_env}
        api.log_resume_plan(key, self.resume)
        SnapshotProgressLink().publish(context)
        try:
            # Progress on the task's "Task State Store" tab while Spark runs.
            with reporting_progress(context, api.snapshot_store, key):
                super().execute(context)
        except AirflowException:
            api.fail_for_a_spent_budget(self.output_path, run_id)
            api.fail_for_a_failed_run(key, run_id)
            raise
        summary = api.read_summary(self.output_path)
        self.log.info("enrichment summary: %s", json.dumps(summary, sort_keys=True))
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = {k: summary.get(k) for k in ASSET_EVENT_KEYS}
        return summary

    def _job_args(
        self, api: EnrichmentApiHook, key: NamespaceKey, run_id: str, token_args: list[str]
    ) -> list[str]:
        """The job's flags from the (rendered) parameters."""
        if self.resume not in RESUME_MODES:
            raise ValueError(f"resume must be one of {RESUME_MODES}, got {self.resume!r}")
        options: dict[str, object] = {
            "--input": self.input_path,
            "--input-format": self.input_format,
            "--output": self.output_path,
            "--key-column": self.key_column,
            "--url-template": api.url_template(self.url_path),
            "--partitions": self.partitions,
            "--capacity": self.capacity,
            "--snapshot-dir": api.snapshot_root,
            "--resume": self.resume,
            "--dag-id": key.dag_id,
            "--task-id": key.task_id,
            "--interval-start": key.interval_start,
            "--run-id": run_id,
        }
        optional: dict[str, object] = {  # a template may render unset as "" or "None"
            "--event-time-column": self.event_time_column,
            "--cache-dir": self.cache_dir,
            "--cache-ttl": self.cache_ttl,
            "--max-requests": self.max_requests,
            "--cost-per-request": self.cost_per_request,
            "--max-dead-letters": self.max_dead_letters,
            "--retry-dead-letters": self.retry_dead_letters,
        }
        options.update({k: v for k, v in optional.items() if v not in (None, "", "None")})
        fields = [("--response-field", f"{n}={p}") for n, p in self.response_fields.items()]
        fields += [("--input-option", f"{k}={v}") for k, v in self.input_options.items()]
        pairs = [*((flag, str(value)) for flag, value in options.items()), *fields]
        return [*(arg for pair in pairs for arg in pair), *token_args, *self.job_args]

    def _spark_master(self) -> str:
        return str(BaseHook.get_connection(self._conn_id).host or "")

    @staticmethod
    def _python_env() -> dict[str, str]:
        """Spark's Python workers start ``python3`` from PATH unless told: use this one."""
        return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}

    def _get_hook(self) -> SparkSubmitHook:
        """The provider's hook, with the packed environment (if any) in its files and conf:
        set here, after templating, so a Variable can name it."""
        pex = self.ship_environment
        if pex and pex != "None":
            files = [name for name in (self.files or "").split(",") if name]
            self.files = ",".join(files if pex in files else [*files, pex])
            self.conf = {
                **(self.conf or {}),
                "spark.pyspark.python": f"./{Path(pex).name}",
                "spark.pyspark.driver.python": sys.executable,
            }
        return super()._get_hook()
