"""Cluster deploy mode for the enrichment operator: durable re-attach and deferral.

In cluster deploy mode the driver runs on the cluster and the Airflow task only watches
it. The Spark provider's ``SparkSubmitOperator`` is a ``ResumableJobMixin``: its
``execute_resumable`` keeps the driver id in the task state store (``spark_job_id``) and,
on a retry, asks the cluster for that driver's state before submitting anything. This
class decides how that combines with the job's own resume (snapshots) and lease:

* **driver still running** (``SUBMITTED``/``RUNNING``/``RELAUNCHING``/``UNKNOWN``): the
  retry re-attaches to it. Nothing is submitted, so no second driver exists to wait for
  the first one's lease, and no API call is made twice. The failure checks use the run id
  of that driver's run, kept beside the driver id (:data:`RUN_ID_KEY`).
* **driver ended in failure** (``FAILED``/``KILLED``/``ERROR``): the retry submits a new
  driver, which resumes from the snapshots (after the dead driver's lease has expired,
  at most the lease TTL, when it died without releasing it).
* **driver finished**: the retry submits nothing and returns the published summary.

With ``deferrable=True`` (standalone masters with REST submission only) the wait after
the submit or re-attach happens in the triggerer (``ClusterRunTrigger``), and
``execute_complete`` ends the try as the blocking path would.

Spark refuses ``.py`` applications in standalone cluster mode ("Cluster deploy mode is
currently not supported for python applications on standalone clusters"), so there the
job is submitted as what spark-submit itself runs for Python in client mode: Spark's
``PythonRunner`` class, with the job's file as its first argument and any jar as the
required primary resource (:func:`python_on_standalone_cluster`). The class goes to the
provider as its ``java_class`` constructor argument on every run: for a ``.py``
application spark-submit runs ``PythonRunner`` in every other mode anyway, so the flag
changes nothing there, and no private attribute of the provider is set after the fact.

Everything here uses the provider's public surface only: the constructor's arguments,
its templated attributes (``application``, ``application_args``, ``conf``, ``files``)
before its ``execute`` builds its hook, the ``ResumableJobMixin`` methods, and the
Spark connection through ``SparkSubmitHook.get_connection``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Connection, Context

from enrichment_airflow.cluster_run_trigger import ClusterRunTrigger
from enrichment_airflow.driver_status import StandaloneRestStatus, standalone_rest_endpoints
from enrichment_airflow.enrichment_hook import EnrichmentApiHook
from enrichment_airflow.namespace import namespace_key
from enrichment_airflow.progress_reporter import INTERVAL_S, report_progress
from enrichment_airflow.run_outcome import fail_run, finish_run
from enrichment_airflow.spark_master import spark_master
from spark_jobs.snapshots import NamespaceKey

#: The task state store key of the run id whose driver ``spark_job_id`` names.
RUN_ID_KEY = "enrichment_run_id"
#: What spark-submit runs for a Python application: it starts the Python driver.
PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"


@dataclass(frozen=True)
class EnrichmentRun:
    """What one try's execute knows of its run: the hook, namespace and run id."""

    api: EnrichmentApiHook
    key: NamespaceKey
    run_id: str


def launcher_jar() -> str:
    """A jar to name as the primary resource: Spark's own core jar, at the path this
    installation has it (each worker copies it from that path into the driver's folder,
    as it must read the job's file there too: same image, same paths)."""
    spec = importlib.util.find_spec("pyspark")  # found, not imported: the DAG parses fast
    if spec is None or spec.origin is None:
        raise RuntimeError("cluster mode needs pyspark installed beside Airflow (its jars)")
    return str(next((Path(spec.origin).parent / "jars").glob("spark-core_*.jar")))


def python_on_standalone_cluster(
    application: str, args: list[str], py_files: str | None
) -> tuple[str, list[str]]:
    """``(application, application_args)`` that run ``application`` (a .py file) through
    ``PythonRunner`` (the ``java_class``): its arguments are the file, the py-files, the
    rest."""
    return launcher_jar(), [application, py_files or "", *args]


class ClusterDriverRun(SparkSubmitOperator):
    """``SparkSubmitOperator`` with the cluster-mode behaviour the module describes.

    :param conn_id: the Spark connection (the provider's ``conn_id``), kept as
        ``spark_conn_id``.
    :param deploy_mode: ``client`` or ``cluster`` over the connection's ``deploy-mode``
        extra (the provider's ``deploy_mode``), kept as ``deploy_mode``.
    :param deferrable: wait in the triggerer, not in a worker slot (standalone cluster
        mode with REST submission); elsewhere the task waits as the provider does.
    :param durable: the provider's re-attach on retry (see the module), on by default.
    """

    #: Set by the operator's ``execute`` before the provider submits.
    api_conn_id: str
    snapshot_root: str | None
    _run: EnrichmentRun

    def __init__(
        self,
        *,
        conn_id: str,
        deploy_mode: str | None = None,
        deferrable: bool,
        durable: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            conn_id=conn_id,
            deploy_mode=deploy_mode,
            java_class=PYTHON_RUNNER,  # why on every run: see the module
            durable=durable,
            **kwargs,
        )
        self.spark_conn_id, self.deploy_mode = conn_id, deploy_mode
        self.deferrable = deferrable
        self._submitted = False

    def spark_connection(self) -> Connection:
        """The Spark connection, looked up as the provider's hook looks it up."""
        return SparkSubmitHook.get_connection(self.spark_conn_id)

    def driver_on_cluster(self, connection: Connection) -> bool:
        """Whether spark-submit starts the driver on the cluster: the ``deploy_mode``
        parameter, else the connection's ``deploy-mode`` extra (the provider's rule)."""
        return (self.deploy_mode or connection.extra_dejson.get("deploy-mode")) == "cluster"

    def standalone_cluster(self) -> bool:
        """Whether the driver runs on a standalone cluster (``spark://``, cluster mode)."""
        connection = self.spark_connection()
        return self.driver_on_cluster(connection) and spark_master(connection).startswith(
            "spark://"
        )

    def run_python_on_standalone_cluster(self) -> None:
        """On a standalone cluster, the job's file as ``PythonRunner``'s first argument
        (see the module), and spark-submit told to submit through the master's REST server;
        elsewhere nothing changes. Called after templating, once the job's arguments are
        built; running it again changes nothing."""
        if self.application.endswith(".py") and self.standalone_cluster():
            self.application, self.application_args = python_on_standalone_cluster(
                self.application, self.application_args or [], self.py_files
            )
            self.conf = {"spark.master.rest.enabled": "true", **(self.conf or {})}

    def submit_job(self, context: Context) -> str | None:
        """The provider submits a new driver (no earlier one to re-attach to): keep its
        run id first, so a retry that re-attaches knows which run it watches."""
        if self.deferrable and self.post_submit_commands:  # run when the provider's poll ends
            raise ValueError("post_submit_commands: a deferred task never runs them")
        state = context.get("task_state_store")
        if state is not None:
            state.set(RUN_ID_KEY, self._run.run_id)
        self._submitted = True
        return super().submit_job(context)

    def poll_until_complete(self, external_id: Any, context: Context) -> None:
        if not self._submitted:  # the provider re-attached to a driver that still runs
            state = context.get("task_state_store")
            stored = state.get(RUN_ID_KEY) if state is not None else None
            run_id = str(stored or self._run.run_id)
            self._run = EnrichmentRun(self._run.api, self._run.key, run_id)
            self.log.info("re-attached to driver %s of run %s: no new driver", external_id, run_id)
        if not self.deferrable:
            return super().poll_until_complete(external_id, context)
        if not self.standalone_cluster():
            self.log.warning("deferrable: standalone cluster mode only; waiting in this worker")
            return super().poll_until_complete(external_id, context)
        report_progress(context, self._run.api.snapshot_store, self._run.key)
        # The run id travels in the trigger's event, not in defer's kwargs: `airflow dags
        # test` resumes with the event alone (see cluster_run_trigger).
        self.defer(trigger=self._trigger(str(external_id)), method_name="execute_complete")

    def _trigger(self, driver_id: str) -> ClusterRunTrigger:
        connection = self.spark_connection()
        extra = connection.extra_dejson
        scheme, port = extra.get("rest-scheme", "http"), int(extra.get("rest-port", 6066))
        endpoints = standalone_rest_endpoints(spark_master(connection), scheme, port)
        key = self._run.key
        return ClusterRunTrigger(
            driver_id=driver_id,
            run_id=self._run.run_id,
            status=StandaloneRestStatus(endpoints).to_spec(),
            snapshot_root=self._run.api.snapshot_root,
            namespace=[key.dag_id, key.task_id, key.interval_start],
            poll_interval_s=INTERVAL_S,
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resumed on a worker once the trigger fired: end the try as ``execute`` does,
        with the run id the event carries (``ClusterRunTrigger``)."""
        api = EnrichmentApiHook(self.api_conn_id, self.snapshot_root)
        key = namespace_key(context)
        report_progress(context, api.snapshot_store, key)
        self.log.info("%s (%s)", event.get("message"), event.get("driver_state"))
        if event.get("status") != "success":
            error = RuntimeError(str(event.get("message")))
            fail_run(self, api, key, str(event["run_id"]), error)
        return finish_run(self, context, api)
