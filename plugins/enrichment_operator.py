"""The resumable enrichment operator: ``SparkSubmitOperator`` plus snapshot awareness.

Before submitting it looks into the snapshot namespace of this task instance and logs
what the run will do ("resuming epoch 12: 48 213 of 100 000 records committed, 64 in
flight"); the job itself then checks the input and configuration fingerprint. After the
job it returns the summary (XCom) and puts the counts and the combined watermark on the
Asset events of its outlets. The API endpoint and token come from an HTTP connection:
the token reaches the job as an environment variable, never on the command line.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fsspec
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException

import spark_jobs
from plugins.links import SnapshotProgressLink
from plugins.namespace import namespace_key, snapshot_root
from plugins.progress_reporter import reporting_progress
from spark_jobs.snapshots import SnapshotStore
from spark_jobs.snapshots.resume import read_progress

ENRICH_JOB = str(Path(spark_jobs.__file__).parent / "enrich_job.py")
TOKEN_ENV = "ENRICHMENT_API_TOKEN"
RESUME_MODES = ("auto", "never", "require")


class ResumableEnrichmentOperator(SparkSubmitOperator):
    """Enrich ``input_path`` into ``output_path`` through the API of ``api_conn_id``.

    :param url_path: path template appended to the connection's base URL, e.g.
        ``/customers/{id}`` (``{field}`` placeholders come from each record).
    :param response_fields: ``{"name": "$.json.path[:type]"}`` output fields.
    :param resume: ``auto`` (default: resume when a valid snapshot exists), ``never``
        (start fresh) or ``require`` (fail unless there is one to resume).
    :param cache_dir: response cache across runs (fsspec URL); empty for none (templated).
    :param cache_ttl: how long cached answers are used, e.g. ``7d`` (templated).
    :param max_requests: request budget of one try; a spent budget fails the task without
        automatic retries, and clearing it resumes (templated).
    :param cost_per_request: price of one call, for the summary's cost report (templated).
    :param ship_environment: the packed runtime from ``make dist`` (``enrich_env.pex``)
        for clusters whose executors lack the job's packages (YARN, Kubernetes, a bare
        standalone cluster): shipped with ``--files`` and run as the executors' Python
        (``spark.pyspark.python``). Empty (default) for ``local[*]`` or prepared workers
        (templated).
    :param job_args: further ``enrich_job`` flags, e.g. ``["--timeout", "10"]``.
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
        "job_args",
    )
    operator_extra_links = (SnapshotProgressLink(),)
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        input_path: str,
        output_path: str,
        key_column: str,
        url_path: str,
        response_fields: dict[str, str],
        api_conn_id: str = "enrichment_api",
        spark_conn_id: str = "spark_enrich",
        resume: str = "auto",
        partitions: int | str = 8,
        capacity: int | str = 100,
        input_format: str = "jsonl",
        event_time_column: str | None = None,
        snapshot_root: str | None = None,
        ship_environment: str | None = None,
        cache_dir: str | None = None,
        cache_ttl: str | None = None,
        max_requests: int | str | None = None,
        cost_per_request: float | str | None = None,
        job_args: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("name", "enrich_job")
        super().__init__(application=ENRICH_JOB, conn_id=spark_conn_id, **kwargs)
        if not url_path.startswith("/"):
            # "@evil/x/{id}" after the connection's host:port would make "evil" the host.
            raise ValueError(f"url_path must start with '/', got {url_path!r}")
        self.input_path = input_path
        self.output_path = output_path
        self.key_column = key_column
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
        self.job_args = list(job_args)

    # The summary goes to XCom; the provider declares its execute as returning None.
    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        if self.resume not in RESUME_MODES:
            raise ValueError(f"resume must be one of {RESUME_MODES}, got {self.resume!r}")
        root = snapshot_root(self.snapshot_root)
        key = namespace_key(context)
        run_id = f"{context['run_id']}.try{context['ti'].try_number}.{uuid.uuid4().hex[:6]}"
        store = SnapshotStore(root)
        self._log_resume_plan(store, key)
        SnapshotProgressLink().publish(context)
        api = BaseHook.get_connection(self.api_conn_id)
        base_url = f"{api.schema or 'http'}://{api.host}" + (f":{api.port}" if api.port else "")
        self.env_vars = {
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            **(self.env_vars or {}),
        }
        token_args = self._pass_token(api.password)
        self.application_args = [
            "--input",
            self.input_path,
            "--input-format",
            self.input_format,
            "--output",
            self.output_path,
            "--key-column",
            self.key_column,
            "--url-template",
            base_url.rstrip("/") + self.url_path,
            *[
                a
                for name, path in self.response_fields.items()
                for a in ("--response-field", f"{name}={path}")
            ],
            *(["--event-time-column", self.event_time_column] if self.event_time_column else []),
            "--partitions",
            str(self.partitions),
            "--capacity",
            str(self.capacity),
            "--snapshot-dir",
            root,
            "--resume",
            self.resume,
            "--dag-id",
            key.dag_id,
            "--task-id",
            key.task_id,
            "--interval-start",
            key.interval_start,
            *token_args,
            "--run-id",
            run_id,
            *self._cost_args(),
            *self.job_args,
        ]
        try:
            with reporting_progress(context, store, key):  # the task's "Task State Store" tab
                super().execute(context)
        except AirflowException:
            self._fail_for_a_spent_budget(run_id)
            raise
        summary = self._read_summary()
        self.log.info("enrichment summary: %s", json.dumps(summary, sort_keys=True))
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = {
                k: summary.get(k)
                for k in (
                    "records_in",
                    "enriched",
                    "dead_letters",
                    "requests_made",
                    "replayed_from_snapshot",
                    "resumed",
                    "watermark",
                    "cost",
                )
            }
        return summary

    def _log_resume_plan(self, store: SnapshotStore, key: Any) -> None:
        progress = read_progress(store, key)
        where = store.namespace_path(key)
        if self.resume == "never":
            self.log.info("resume=never: starting fresh; any snapshot in %s is discarded", where)
        elif progress.partitions:
            total = (store.read_job_record(key) or {}).get("records_in")
            self.log.info("resuming %s (%s)", progress.describe(total), where)
        else:
            self.log.info("starting fresh: no snapshot for this run yet (%s)", where)

    def _pass_token(self, token: str | None) -> list[str]:
        """Hand the API token to the job by environment variable; the job's flags name
        the variable, never the token.

        On YARN and Kubernetes the provider turns ``env_vars`` into
        ``--conf spark.yarn.appMasterEnv.*`` / ``spark.kubernetes.driverEnv.*`` on the
        spark-submit command line, visible in ``ps`` and the pod spec: refused there.
        """
        if not token:
            return []
        master = str(BaseHook.get_connection(self._conn_id).host or "")
        if master.startswith(("yarn", "k8s://")):
            raise ValueError(
                f"the API token of connection {self.api_conn_id!r} would reach the "
                f"spark-submit command line on {master.split('://')[0]}: leave its password "
                "empty and give the executors the token another way: a file "
                '(job_args=["--spec", ...] with http: {token_file: ...}), a Kubernetes '
                "secret (conf spark.kubernetes.driver.secretKeyRef.ENRICHMENT_API_TOKEN and "
                "spark.kubernetes.executor.secretKeyRef.ENRICHMENT_API_TOKEN, then "
                'job_args=["--token-env", "ENRICHMENT_API_TOKEN"]), or YARN credentials'
            )
        self.env_vars = {**(self.env_vars or {}), TOKEN_ENV: token}
        return ["--token-env", TOKEN_ENV]

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

    def _cost_args(self) -> list[str]:
        """Flags of the cost options that are set (a template may render None as "")."""
        options = {
            "--cache-dir": self.cache_dir,
            "--cache-ttl": self.cache_ttl,
            "--max-requests": self.max_requests,
            "--cost-per-request": self.cost_per_request,
        }
        return [
            arg
            for flag, value in options.items()
            if value not in (None, "", "None")
            for arg in (flag, str(value))
        ]

    def _fail_for_a_spent_budget(self, run_id: str) -> None:
        """A run that spent its ``--max-requests`` ends failed *without* automatic
        retries: a retry would spend another budget at once, which is what the budget is
        there to prevent. Clearing the task (or the next run of this interval) resumes."""
        try:
            summary = self._read_summary()
        except (OSError, ValueError):
            return
        if summary.get("run_id") == run_id and summary.get("budget_exhausted"):
            raise AirflowFailException(
                f"request budget spent: {summary['records_done']} of {summary['records_in']} "
                f"records done, {summary['records_left']} left; clear this task to resume "
                "(committed work is kept and not paid again)"
            )

    def _read_summary(self) -> dict[str, Any]:
        with fsspec.open(f"{self.output_path.rstrip('/')}/_SUMMARY.json") as file:
            return json.load(file)
