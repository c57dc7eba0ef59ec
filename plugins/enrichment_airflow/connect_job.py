"""The job over Spark Connect from an Airflow task: no spark-submit, no local JVM.

With a ``spark_connect`` connection (the Spark provider's ``SparkConnectHook``: host,
port, the user id in its login, a token in its password, ``use_ssl`` in its extra) the
operator runs the job's driver as a Connect client in a child process,
``python -m spark_jobs.enrich_job``, with the same flags a spark-submit run gets. A
child, not the task process itself: the job's exit status, logging and session stay its
own, as under spark-submit, and killing the task kills it. The server's executors run
the partitions; the job ships its own code there (``spark_jobs/session/connect.py``).

The connection's URL reaches the child in ``SPARK_REMOTE`` (it may hold the token):
never on a command line, and logged with the token hidden.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import Any

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.sdk.exceptions import AirflowException

from spark_jobs.exit_status import ExitStatus
from spark_jobs.launch import REMOTE_ENV, redacted

logger = logging.getLogger(__name__)


def connect_url(conn_id: str) -> str:
    """The ``sc://`` URL of connection ``conn_id``, as the provider's hook builds it."""
    return SparkConnectHook(conn_id).get_connection_url()


class ConnectJobRun:
    """One run of the job as a Spark Connect client of ``conn_id``'s server."""

    def __init__(self, conn_id: str) -> None:
        self.conn_id = conn_id
        self._process: subprocess.Popen[str] | None = None

    def master(self) -> str:
        """The server's URL for messages and checks: its token hidden."""
        return redacted(connect_url(self.conn_id))

    # ``op`` is a ResumableEnrichmentOperator after templating, its job's flags built.
    def run(self, op: Any) -> None:
        """Run the job with the operator's flags (``application_args``) and environment
        (``env_vars`` over the task's), its output in the task log; raises
        ``AirflowException`` when it fails."""
        if op.ship_environment not in (None, "", "None"):  # a template may render unset so
            raise ValueError(
                "ship_environment: a PEX cannot become a Spark Connect server's Python; over "
                "spark_connect_conn_id the job ships its own code, and its dependencies must "
                "be installed on the server"
            )
        args, env = list(op.application_args or []), dict(op.env_vars or {})
        url = connect_url(self.conn_id)
        logger.info("running enrich_job as a Spark Connect client of %s", redacted(url))
        self._process = subprocess.Popen(
            [sys.executable, "-m", "spark_jobs.enrich_job", *args],
            env={**os.environ, **env, REMOTE_ENV: url},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for line in self._process.stdout or ():
            logger.info("%s", redacted(line.rstrip()))
        status = self._process.wait()
        if status != ExitStatus.DONE:
            raise AirflowException(
                f"enrich_job over Spark Connect ({self.conn_id}) exited with status {status}"
            )

    def kill(self) -> None:
        """Stop the client (the task was killed); the lease fences off its server-side
        tasks once the next try takes over."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
