"""The enrichment API's Airflow hook: its connection, and what a run leaves behind.

Like the Spark provider's ``SparkSubmitHook`` it resolves the connection so the operator
only wires. It owns the API's base URL and bearer token, the one safe route for the
token into the job (an environment variable, refused where Spark would print it), and
reading what the job writes: the snapshot namespace (to say whether a run resumes) and
``_SUMMARY.json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any

import fsspec
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowFailException

from enrichment_airflow.namespace import snapshot_root
from enrichment_airflow.spark_master import env_stays_off_command_line
from spark_jobs.defaults import DEAD_LETTER_RETRY_SUFFIX
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.resume import resume_progress

TOKEN_ENV = "ENRICHMENT_API_TOKEN"
"""The environment variable that carries the connection's token to the job."""
HEADER_ENV_PREFIX = "ENRICHMENT_API_HEADER_"
"""``secret_headers`` values travel in ``ENRICHMENT_API_HEADER_<NAME>`` (``X_API_KEY``)."""
BEARER_AUTO = "auto"
BEARER_NONE = "none"


class EnrichmentApiHook(BaseHook):
    """The API behind ``api_conn_id``, and the snapshots and summary of a run.

    The connection (any type; ``enrichment_api`` once the package is installed, ``http``
    works the same) gives ``schema`` (``http`` or ``https``), ``host``, ``port``, and the
    secrets: ``password`` (the bearer token by default) and keys of ``extra``
    (``{"api_key": "..."}``), which the operator's ``bearer_token`` and
    ``secret_headers`` name.

    :param api_conn_id: the API's connection id.
    :param snapshot_root: where snapshots live (any fsspec URL); empty for the
        ``enrichment_snapshot_root`` Variable.
    """

    conn_name_attr = "api_conn_id"
    default_conn_name = "enrichment_api"
    conn_type = "enrichment_api"
    hook_name = "Enrichment API"

    def __init__(self, api_conn_id: str = default_conn_name, snapshot_root: str | None = None):
        super().__init__()
        self.api_conn_id = api_conn_id
        self._snapshot_root = snapshot_root

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["login"],
            "relabeling": {
                "schema": "Scheme (http or https)",
                "password": "Password (bearer token or API key)",
            },
            "placeholders": {"host": "api.example.com", "schema": "https"},
        }

    def get_conn(self) -> Any:
        return self.connection

    @cached_property
    def connection(self) -> Any:
        return self.get_connection(self.api_conn_id)

    @property
    def base_url(self) -> str:
        """``scheme://host[:port]`` of the API, without a trailing slash."""
        api = self.connection
        url = f"{api.schema or 'http'}://{api.host}" + (f":{api.port}" if api.port else "")
        return url.rstrip("/")

    def url_template(self, url_path: str) -> str:
        """The job's ``--url-template``: the base URL and ``url_path`` (``/customers/{id}``)."""
        return self.base_url + url_path

    def token_route(
        self,
        spark_master: str,
        bearer_token: str = BEARER_AUTO,
        secret_headers: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, str], list[str]]:
        """The secrets' way into the job: (spark-submit environment, job flags naming the
        variables); empty without secrets. The flags name variables, never values.

        ``bearer_token`` is the connection field sent as ``Authorization: Bearer``
        (``password``, ``extra.<key>``), ``none``, or ``auto``: the password when there
        are no ``secret_headers`` (what this operator always sent), else none.
        ``secret_headers`` maps a header to the connection field holding its value.

        ``spark_master`` is the master as the Spark provider resolves it
        (``enrichment_airflow.spark_master``). On YARN and Kubernetes the provider turns
        ``env_vars`` into ``--conf spark.yarn.appMasterEnv.*`` /
        ``spark.kubernetes.driverEnv.*`` on the spark-submit command line, visible in
        ``ps`` and the pod spec: secrets are refused on every master but local and
        ``spark://`` ones.
        """
        token, values = self._secrets(bearer_token, secret_headers or {})
        env: dict[str, str] = {}
        args: list[str] = []
        if token:  # an empty password under "auto"/"password": no bearer, as before
            env[TOKEN_ENV], args = token, ["--token-env", TOKEN_ENV]
        for header, value in values.items():
            variable = header_variable(header)
            if variable in env:
                raise ValueError(f"secret_headers: {header} is given twice (as {variable})")
            env[variable] = value
            args += ["--secret-header", f"{header}={variable}"]
        if env and not env_stays_off_command_line(spark_master):
            raise ValueError(
                f"the API secrets of connection {self.api_conn_id!r} would reach the "
                f"spark-submit command line with master {spark_master!r} (only local and "
                "spark:// masters keep env_vars off it): leave its password empty and "
                "give the executors the token another way: a file "
                '(job_args=["--spec", ...] with http: {token_file: ...}), a Kubernetes '
                f"secret (conf spark.kubernetes.driver.secretKeyRef.{TOKEN_ENV} and "
                f"spark.kubernetes.executor.secretKeyRef.{TOKEN_ENV}, then "
                f'job_args=["--token-env", "{TOKEN_ENV}"]), or YARN credentials'
            )
        return env, args

    def secret_header_values(
        self, bearer_token: str = BEARER_AUTO, secret_headers: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The secret headers the job sends (see :meth:`token_route`), with their values:
        for a caller outside the job, such as the batch trigger. Never log them."""
        token, values = self._secrets(bearer_token, secret_headers or {})
        return {**({"Authorization": f"Bearer {token}"} if token else {}), **values}

    def _secrets(
        self, bearer_token: str, secret_headers: Mapping[str, str]
    ) -> tuple[str, dict[str, str]]:
        """The bearer token ("" for none) and each secret header's value."""
        if bearer_token == BEARER_AUTO:
            bearer_token = BEARER_NONE if secret_headers else "password"
        token = ""
        if bearer_token != BEARER_NONE:
            token = self.connection_secret(bearer_token, "bearer_token", bearer_token != "password")
        values = {
            header: self.connection_secret(source, f"secret_headers.{header}", True)
            for header, source in secret_headers.items()
        }
        return token, values

    def connection_secret(self, source: str, option: str, required: bool) -> str:
        """The value of connection field ``source`` (``password`` or ``extra.<key>``);
        ``option`` (the parameter naming it) goes into errors, the value never does."""
        api = self.connection
        if source == "password":
            value = api.password or ""
        elif source.startswith("extra.") and len(source) > len("extra."):
            value = str(api.extra_dejson.get(source.removeprefix("extra."), "") or "")
        else:
            raise ValueError(
                f"{option}: expected 'password' or 'extra.<key>' (a field of connection "
                f"{self.api_conn_id!r}), got {source!r}"
            )
        if required and not value:
            raise ValueError(f"{option}: connection {self.api_conn_id!r} has no {source}")
        return value

    @cached_property
    def snapshot_root(self) -> str:
        return snapshot_root(self._snapshot_root)

    @cached_property
    def snapshot_store(self) -> SnapshotStore:
        return SnapshotStore(self.snapshot_root)

    def log_resume_plan(self, key: NamespaceKey, resume: str) -> None:
        """Say before submitting what the run will do; the job itself then checks the
        input and configuration fingerprint."""
        store = self.snapshot_store
        where = store.namespace_path(key)
        if resume == "never":
            self.log.info("resume=never: starting fresh; any snapshot in %s is discarded", where)
            return
        progress = resume_progress(store, key)
        if progress.partitions:
            self.log.info("resuming %s (%s)", progress.describe(self._size(key)), where)
        else:
            self.log.info("starting fresh: no snapshot for this run yet (%s)", where)

    def describe_next_try(self, key: NamespaceKey, resume: str) -> str:
        """What a retry of a failed run will do, for the failure message."""
        if resume == "never":
            return "the next try starts fresh (resume=never)"
        progress = resume_progress(self.snapshot_store, key)
        if not progress.partitions:
            return "the next try starts fresh: no snapshot was committed"
        return f"the next try resumes from {progress.describe(self._size(key))}"

    def _size(self, key: NamespaceKey) -> int | None:
        """The input records of the namespace's job, when its job record says."""
        record = self.snapshot_store.read_job_record(key)
        return record.records_in if record is not None else None

    def read_summary(self, output_path: str) -> JobSummary:
        """The published ``_SUMMARY.json`` of ``output_path`` (ValueError when it is not
        one: the message names the field)."""
        path = f"{output_path.rstrip('/')}/_SUMMARY.json"
        with fsspec.open(path) as file:
            return JobSummary.from_json(json.load(file), path)

    def fail_for_a_spent_budget(self, output_path: str, run_id: str) -> None:
        """A run that spent its ``--max-requests`` ends failed *without* automatic
        retries: a retry would spend another budget at once, which is what the budget is
        there to prevent. Clearing the task (or the next run of this interval) resumes."""
        try:
            summary = self.read_summary(output_path)
        except (OSError, ValueError):
            return
        stop = summary.budget
        if summary.run_id == run_id and stop is not None and not stop.batches_running:
            raise AirflowFailException(
                f"{stop.describe(summary.records_in)}; clear this task to resume "
                "(committed work is kept and not paid again)"
            )

    def fail_for_a_failed_run(self, key: NamespaceKey, run_id: str) -> None:
        """A run the job failed as a whole (a systemic failure, a dead-letter ceiling) ends
        failed *without* automatic retries, saying why and what a retry will do: the same
        run again would only fail the same way. Its reason is in the job record of the
        namespace (or of its ``--retry-dead-letters`` namespace)."""
        retry_key = NamespaceKey(
            key.dag_id, key.task_id + DEAD_LETTER_RETRY_SUFFIX, key.interval_start
        )
        records = [self.snapshot_store.read_job_record(k) for k in (key, retry_key)]
        failures = [r.last_failure for r in records if r is not None and r.last_failure]
        failure = next((f for f in failures if f.run_id == run_id), None)
        if failure is None:
            return
        self.log.error("enrichment run failed: %s", failure.reason)
        raise AirflowFailException(f"{failure.reason} A retry: {failure.retry}")


def header_variable(header: str) -> str:
    """The environment variable carrying ``header``'s value: ``X-Api-Key`` gives
    ``ENRICHMENT_API_HEADER_X_API_KEY``."""
    return HEADER_ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", header).upper()
