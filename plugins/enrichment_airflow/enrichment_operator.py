"""The resumable enrichment operator: ``SparkSubmitOperator`` plus snapshot awareness.

It wires, as the Spark provider's operators do: ``EnrichmentApiHook`` resolves the API
connection and token and reads what the job leaves behind; the Spark provider's own hook
submits. Before submitting the task log says what the run will do ("resuming epoch 12:
48 213 of 100 000 records committed, 64 in flight"); after the job the summary is the
XCom and its counts and combined watermark go on the Asset events of the outlets; a
failure says what the next try will do. Secrets (the bearer token, secret headers) reach
the job as environment variables, never on the command line.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Context, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from enrichment_airflow.batch_deferral import detach_flags
from enrichment_airflow.cluster_run import ClusterDriverRun, EnrichmentRun
from enrichment_airflow.connect_job import ConnectJobRun
from enrichment_airflow.enrichment_hook import BEARER_AUTO, EnrichmentApiHook
from enrichment_airflow.job_arguments import job_arguments
from enrichment_airflow.links import SnapshotProgressLink
from enrichment_airflow.namespace import namespace_key
from enrichment_airflow.progress_reporter import reporting_progress
from enrichment_airflow.run_outcome import fail_run, finish_run
from enrichment_airflow.spark_master import spark_master
from spark_jobs import defaults, launch
from spark_jobs.defaults import summary_location
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import NamespaceKey


class ResumableEnrichmentOperator(ClusterDriverRun):
    """Enrich ``input_path`` into ``output_path`` through the API of ``api_conn_id``.

    :param input_path: the input: a file, directory or glob, any Spark URL (templated).
    :param output_path: where the result goes: ``_SUMMARY.json``, naming the run folder
        ``runs/<run id>/`` with ``data/`` and ``dead_letters/`` (templated).
    :param key_column: the record key, one column or several (``"a,b"`` or a list):
        partitioning and order within a partition.
    :param url_path: path template appended to the connection's base URL, e.g.
        ``/customers/{id}`` (``{field}`` placeholders come from each record).
    :param response_fields: ``{"name": "$.json.path[:type]"}`` output fields.
    :param api_conn_id: the API's connection (``EnrichmentApiHook``): host, port, scheme,
        and the secrets (its password, keys of its extra) that ``bearer_token`` and
        ``secret_headers`` name.
    :param method: the HTTP method, ``GET`` (default), ``POST``, ``PUT``, ``PATCH`` or
        ``DELETE`` (templated).
    :param body_template: the JSON body, a mapping whose string values may hold
        ``{field}`` placeholders (``{"address": "{street}"}``), or its JSON text; None
        for no body (templated): Jinja renders ``{{ }}``, ``{field}`` is left to the job.
    :param headers: headers sent with every call, not secrets (templated).
    :param secret_headers: header name -> the connection field holding its value:
        ``"password"`` or ``"extra.<key>"``, e.g. ``{"X-Api-Key": "password"}``. The values
        reach the job only as environment variables, never the command line (templated).
    :param bearer_token: the connection field sent as ``Authorization: Bearer``
        (``"password"``, ``"extra.<key>"``), ``"none"``, or ``"auto"`` (default): the
        password when ``secret_headers`` is empty, as before, else none (templated).
    :param spark_conn_id: the Spark connection (the provider's ``conn_id``).
    :param spark_connect_conn_id: a ``spark_connect`` connection: run the job as a Spark
        Connect client of its server, not with spark-submit (``connect_job.py``).
    :param resume: ``auto`` (default: resume when a valid snapshot exists), ``never``
        (start fresh) or ``require`` (fail unless there is one to resume) (templated).
    :param partitions: fixed partition count; a resumed run must use the same one
        (templated).
    :param capacity: requests in flight per partition (templated).
    :param input_format: ``jsonl``, ``parquet`` or ``csv``.
    :param output_format: ``parquet`` (default: run folders named by ``_SUMMARY.json``),
        ``delta`` or ``iceberg``: ``output_path`` is then a table, one commit per run
        carrying the run's identity, partitioned by the data interval; an Iceberg
        catalog other than the embedded SQLite one goes in ``job_args``
        (``--iceberg-catalog``) (templated).
    :param write_mode: how a run's rows join a table: ``append`` (default),
        ``replace-interval`` (a backfill or Clear re-runs its day without duplicating
        it) or ``merge`` (by ``key_column``: the enriched columns of present keys updated)
        (templated).
    :param dead_letter_layout: a table's dead letters: ``table`` (default, beside it as
        ``<output_path>_dead_letters``) or ``inline`` (``_status``, ``_error``,
        ``_attempts`` columns) (templated).
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
    :param model_mode: ``online`` or ``batch`` (``--model-mode``): a model section's
        requests one call each, or through its provider's batch API at half the price;
        a run may switch and pays nothing twice (templated).
    :param spark_log_level: level of Spark's own logging in the task log, ``WARN`` by
        default (``INFO``, ``DEBUG`` to see Spark's own lines); the job's decision,
        progress and summary always show (templated).
    :param job_args: further ``enrich_job`` flags, e.g. ``["--timeout", "10"]`` (templated).
    :param deferrable: in standalone cluster mode (``spark://`` master with
        ``spark.master.rest.enabled``, ``deploy-mode`` cluster) submit, then wait in the
        triggerer, holding no worker slot; progress goes to the task log. With
        ``model_mode="batch"`` (and the model section as ``--model`` in ``job_args``), in
        any deploy mode: the job submits the provider batches and ends, the task waits
        for them in the triggerer, then runs the job again to read and publish their
        rows (``enrichment_airflow.batch_deferral``). Default: the ``[operators]
        default_deferrable`` option. Elsewhere the task waits in its worker.
    :param durable: the Spark provider's durable execution (its ``ResumableJobMixin``),
        set explicitly, default True. It decides whether a try submits a driver at all; our
        snapshots decide how much a new driver redoes; both act inside ``super().execute()``.
        The provider uses it where it tracks a driver it does not hold: standalone cluster
        mode, and Kubernetes or YARN cluster mode with ``track_driver_via_k8s_api`` or
        ``yarn_track_via_rm_api`` (YARN cluster mode refuses ``durable=True`` without the
        latter). There it keeps the driver's id in the task state store, and a retry asks
        the cluster first: a driver still running is watched, not submitted again (no
        second driver, no wait for the first one's snapshot lease, no call made twice); a
        finished one is not run again (the published summary is the result); a failed one
        is replaced by a new driver, which resumes from the snapshots. With
        ``durable=False``, and in client mode, every try submits a new driver, and the
        snapshots alone make it resume. See ``enrichment_airflow.cluster_run``.
    :param kwargs: ``SparkSubmitOperator``'s parameters (``conf``, ``files``,
        ``deploy_mode``, ``env_vars``...), except ``application``, ``conn_id``,
        ``java_class`` and ``application_args``, which this operator sets: extra job flags
        go in ``job_args``. ``conf`` and ``files`` go to the provider's constructor as given;
        what the job itself needs (``ship_environment``, the REST submission of a standalone
        cluster, the driver's log level) depends on rendered templates and on the Spark
        connection, so it is added to them in ``execute``, before the provider builds its
        hook (``prepare_submit``): files given here stay, and so do the user's
        ``spark.driver.extraJavaOptions`` and ``spark.master.rest.enabled``; a shipped
        runtime sets ``spark.pyspark.python`` and ``spark.pyspark.driver.python``.
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
        "output_format",
        "write_mode",
        "dead_letter_layout",
        "model_mode",
        "job_args",
        "method",
        "body_template",
        "headers",
        "secret_headers",
        "bearer_token",
        "spark_log_level",
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
        spark_connect_conn_id: str | None = None,
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
        output_format: str = defaults.OUTPUT_FORMAT,
        write_mode: str = defaults.WRITE_MODE,
        dead_letter_layout: str = defaults.DEAD_LETTER_LAYOUT,
        model_mode: str | None = None,
        job_args: Sequence[str] = (),
        method: str = "GET",
        body_template: Any = None,
        headers: Mapping[str, str] | None = None,
        secret_headers: Mapping[str, str] | None = None,
        bearer_token: str = BEARER_AUTO,
        spark_log_level: str = defaults.SPARK_LOG_LEVEL,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        durable: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.update(deferrable=deferrable, durable=durable, name=kwargs.get("name", "enrich_job"))
        super().__init__(application=launch.ENRICH_JOB, conn_id=spark_conn_id, **kwargs)
        self._refuse_bad_arguments(url_path)
        self.input_path, self.output_path = input_path, output_path
        self.key_column = key_column if isinstance(key_column, str) else ",".join(key_column)
        self.url_path, self.response_fields = url_path, dict(response_fields)
        self._connect = ConnectJobRun(spark_connect_conn_id) if spark_connect_conn_id else None
        self.partitions, self.capacity, self.resume = partitions, capacity, resume
        self.api_conn_id, self.dead_letter_layout = api_conn_id, dead_letter_layout
        self.input_format, self.event_time_column = input_format, event_time_column
        self.snapshot_root, self.ship_environment = snapshot_root, ship_environment
        self.cache_dir, self.cache_ttl, self.model_mode = cache_dir, cache_ttl, model_mode
        self.max_requests, self.cost_per_request = max_requests, cost_per_request
        self.input_options, self.job_args = dict(input_options or {}), list(job_args)
        self.max_dead_letters, self.retry_dead_letters = max_dead_letters, retry_dead_letters
        self.output_format, self.write_mode = output_format, write_mode
        self.method, self.body_template, self.bearer_token = method, body_template, bearer_token
        self.headers, self.secret_headers = dict(headers or {}), dict(secret_headers or {})
        self.spark_log_level, self.api_url = spark_log_level, ""
        self.summary = JobSummary(records_in=0, enriched=0, dead_letters=0)  # finish_run sets it

    def summary_location(self, key: NamespaceKey) -> str:
        """Where the job writes this task's summary: the output, or for a table the
        folder of the task's interval partition."""
        return summary_location(self.output_path, self.output_format, key.interval_start)

    def _refuse_bad_arguments(self, url_path: str) -> None:
        if self.application_args:  # also from default_args: it would be replaced silently
            raise ValueError(
                "application_args: this operator builds the job's arguments from its "
                f"parameters; pass further enrich_job flags as job_args, got "
                f"{self.application_args!r}"
            )
        if not url_path.startswith("/"):
            # "@evil/x/{id}" after the connection's host:port would make "evil" the host.
            raise ValueError(f"url_path must start with '/', got {url_path!r}")

    # The summary goes to XCom; the provider declares its execute as returning None.
    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        api = EnrichmentApiHook(self.api_conn_id, self.snapshot_root)
        key = namespace_key(context)
        run_id = f"{context['run_id']}.try{context['ti'].try_number}.{uuid.uuid4().hex[:6]}"
        self._run = EnrichmentRun(api, key, run_id)  # a re-attaching retry takes the old id
        token_env, token_args = api.token_route(
            self._spark_master(), self.bearer_token, self.secret_headers
        )
        self.application_args = [
            *job_arguments(self, api, key, run_id, token_args),
            *detach_flags(self),
        ]
        # spark-submit's environment never reaches a driver on a standalone cluster (the
        # provider refuses env_vars there): it reads the token variable on its worker.
        if not self.standalone_cluster():
            self.env_vars = {**self._python_env(), **(self.env_vars or {}), **token_env}
        api.log_resume_plan(key, self.resume)
        SnapshotProgressLink().publish(context)
        try:
            # Progress on the task's "Task State Store" tab while Spark runs.
            with reporting_progress(context, api.snapshot_store, key):
                self._submit(context)
        except AirflowException as error:
            fail_run(self, api, key, self._run.run_id, error)
        return finish_run(self, context, api)

    def resume_after_batches(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resumed on a worker once the provider's batches ended (``BatchWaitTrigger``):
        the job runs again, reads their rows and publishes (or defers again)."""
        self.log.info("%s", event.get("message"))
        if event.get("status") != "success":  # the provider refuses to show a batch
            raise AirflowFailException(
                f"{event.get('message')}; the batches and snapshots are kept: fix the "
                "connection, then clear this task to resume"
            )
        return self.execute(context)

    def _submit(self, context: Context) -> None:
        """spark-submit through the provider, or the job as a Spark Connect client."""
        if self._connect is None:
            self.prepare_submit()
            return super().execute(context)
        return self._connect.run(self)

    def prepare_submit(self) -> None:
        """Add what the job needs to the provider's ``application``, ``application_args``,
        ``conf`` and ``files``, its public (templated) attributes, once they are rendered
        and the job's arguments built: the provider's ``execute`` builds its hook from them,
        as it does itself when it adds OpenLineage's settings to ``conf``. Running it again
        changes nothing."""
        self.run_python_on_standalone_cluster()
        conf = dict(self.conf or {})
        pex = self._shipped_environment()
        if pex:
            files = [name for name in (self.files or "").split(",") if name]
            self.files = ",".join(files if pex in files else [*files, pex])
            conf["spark.pyspark.python"] = f"./{Path(pex).name}"
            conf["spark.pyspark.driver.python"] = sys.executable
        # Spark's logging at spark_log_level from the driver JVM's start, through the job's
        # shipped log4j2 file. In cluster deploy mode the driver runs elsewhere, where that
        # file's path means nothing: the job sets the level once it starts.
        if not self.driver_on_cluster(self.spark_connection()):
            conf = launch.with_java_options(conf, self.spark_log_level)
        self.conf = conf

    def on_kill(self) -> None:
        return super().on_kill() if self._connect is None else self._connect.kill()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Inputs (files, the API), outputs (result, dead letters), counts and cost, for
        Airflow's OpenLineage provider (``plugins/enrichment_airflow/lineage.py``)."""
        from enrichment_airflow.lineage import lineage_on_complete

        return lineage_on_complete(self.input_path, self.output_path, self.api_url, self.summary)

    def standalone_cluster(self) -> bool:
        """A Spark Connect run has no spark-submit connection to ask: its driver is here."""
        return self._connect is None and super().standalone_cluster()

    def _spark_master(self) -> str:
        """The master the Spark provider will submit to, resolved by its own rule."""
        if self._connect is not None:  # the Spark Connect URL, its token hidden
            return self._connect.master()
        return spark_master(self.spark_connection())

    @staticmethod
    def _python_env() -> dict[str, str]:
        """Spark's Python workers start ``python3`` from PATH unless told: use this one."""
        return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}

    def _shipped_environment(self) -> str | None:
        """``ship_environment``, checked: every executor runs it as its Python, and
        ``spark.files`` would fetch an http(s) URL too, so whoever may edit the Variable
        that names it must not be able to point it at another program or host."""
        pex = self.ship_environment
        if not pex or pex == "None":
            return None
        if "://" in pex or Path(pex).suffix != ".pex" or not Path(pex).is_file():
            raise ValueError(
                f"ship_environment (in the example DAG the Airflow Variable "
                f"{defaults.SHIP_ENVIRONMENT_VARIABLE!r}) must be an existing local .pex file "
                f"(the one `make dist` builds), not a URL or a directory; got {pex!r}"
            )
        return pex
