"""A real Spark standalone cluster on loopback: one master, workers on distinct loopback
addresses (127.0.0.2, 127.0.0.3...) so Spark sees distinct hosts, as speculation needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pyspark

from demo.stack import free_port

SPARK_HOME = Path(pyspark.__file__).parent


def _spark_class(
    main: str, *args: str, host: str, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen:
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": host,
        "PYSPARK_PYTHON": sys.executable,
        **(env or {}),
    }
    return subprocess.Popen(
        [str(SPARK_HOME / "bin" / "spark-class"), main, *args],
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@contextmanager
def standalone_cluster(
    tmp: Path,
    workers: int = 2,
    cores: int = 1,
    worker_env: dict[str, str] | None = None,
    auth_secret: str | None = None,
    rest_port: int | None = None,
):
    """Yields the master URL once every worker has registered; stops everything after.
    ``worker_env`` overrides the workers' environment (and so their executors');
    ``auth_secret`` turns on ``spark.authenticate`` with that secret, as the compose
    stack does (``_SPARK_AUTH_SECRET`` in the daemons' environment); ``rest_port`` turns
    on the master's REST submission server there (``spark.master.rest.enabled``: cluster
    deploy mode through ``spark://127.0.0.1:<rest_port>``; Spark refuses it together with
    ``spark.authenticate``)."""
    auth: dict[str, str] = {}
    if auth_secret is not None:
        auth = {"_SPARK_AUTH_SECRET": auth_secret, "SPARK_MASTER_OPTS": "-Dspark.authenticate=true"}
        auth["SPARK_WORKER_OPTS"] = auth["SPARK_MASTER_OPTS"]
    master_env = dict(auth)
    if rest_port is not None:
        rest = f"-Dspark.master.rest.enabled=true -Dspark.master.rest.port={rest_port}"
        master_env["SPARK_MASTER_OPTS"] = f"{auth.get('SPARK_MASTER_OPTS', '')} {rest}".strip()
    port, ui_port = free_port(), free_port()
    processes = [
        _spark_class(
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui_port),
            host="127.0.0.1",
            log=tmp / "master.log",
            env=master_env,
        )
    ]
    master = f"spark://127.0.0.1:{port}"
    try:
        for number in range(workers):
            host = f"127.0.0.{number + 2}"
            processes.append(
                _spark_class(
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    host,
                    "--cores",
                    str(cores),
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(tmp / f"work{number}"),
                    master,
                    host=host,
                    log=tmp / f"worker{number}.log",
                    env={**auth, **(worker_env or {})},
                )
            )
        deadline = time.monotonic() + 300  # JVMs start slowly on a busy machine
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
                    if (
                        len([w for w in json.loads(r.read())["workers"] if w["state"] == "ALIVE"])
                        == workers
                    ):
                        break
            except (OSError, ValueError):  # not listening yet, or an empty page while it starts
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError(f"standalone cluster did not start; see logs in {tmp}")
        yield master
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
