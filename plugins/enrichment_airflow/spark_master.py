"""The Spark master as the Spark provider resolves it, and whether ``env_vars`` stay off
the spark-submit command line there.

The provider's ``SparkSubmitHook`` builds the master from the connection: the host
itself for a ``spark`` connection whose host holds a URL or has no port (the UI form:
``{"conn_type": "spark", "host": "local[*]"}``), otherwise ``conn_type://host``; then
``:port``. A URI connection (``AIRFLOW_CONN_SPARK_ENRICH=k8s://https%3A%2F%2Fkube...``)
has conn_type ``k8s`` and host ``https://kube...``, so the host alone does not say where
the job runs. The provider then treats the master as YARN or Kubernetes when ``yarn`` or
``k8s`` appears *anywhere* in it, and there it turns ``env_vars`` into
``--conf spark.yarn.appMasterEnv.*`` / ``spark.kubernetes.driverEnv.*`` arguments: on the
command line, in ``ps``, in its own "Spark-Submit cmd" log line and in the pod spec.

So the secrets' environment route is decided on that same master, by an allow-list
rather than by recognising the dangerous cases: ``local``, ``local[N]``,
``local-cluster[...]`` and ``spark://`` masters, in which neither substring appears,
hand ``env_vars`` to the spark-submit process's environment only. Anything else (a
master the provider may learn to treat differently) is refused.
"""

from __future__ import annotations

import re

from airflow.sdk import Connection

_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\]|-cluster\[[^\]]*\])?")
#: The provider's own test for YARN and Kubernetes: a substring of the master.
_PRINTS_ENV = ("yarn", "k8s")


def spark_master(connection: Connection) -> str:
    """The ``--master`` the Spark provider builds from ``connection`` (an Airflow
    ``Connection``), by the provider's rule (``SparkSubmitHook._resolve_connection``)."""
    host = connection.host
    if connection.conn_type == "spark" and host and ("://" in host or not connection.port):
        master = host
    else:
        master = f"{connection.conn_type}://{host or ''}"
    return f"{master}:{connection.port}" if connection.port else master


def env_stays_off_command_line(master: str) -> bool:
    """Whether the provider hands ``env_vars`` to spark-submit's environment, never to
    its arguments, with this master: only local and standalone (``spark://``) masters,
    and Spark Connect (``sc://``), where the job's client gets them without spark-submit."""
    if master.startswith("sc://"):  # Spark Connect: the client's environment, no spark-submit
        return True
    if any(word in master.lower() for word in _PRINTS_ENV):
        return False
    return bool(_LOCAL_MASTER.fullmatch(master)) or master.startswith("spark://")
